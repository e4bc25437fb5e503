"""The storage behind the gateway in tests: the product's own, on the test database.

Telemetry goes through the process's ingestor into NodeGpuSample rows and the node's TelemetryCursor,
events through apps.telemetry.events into AgentEvent rows, and an ack or a Welcome says what that
cursor holds: "ack 5 after a replayed 3" is the storage's own dedup. Every gateway test over a socket
runs on it; a test that breaks storage on purpose replaces one sink with a fault injector.

This module is the one place that knows how the ingestor is started and stopped: it is a part of the
process (apps/core/process.py), started on first use and shut down through its public ``shutdown``.
"""

from collections.abc import AsyncIterator

import pytest_asyncio
from channels.db import database_sync_to_async
from django.utils import timezone
from pytest_django.fixtures import Settings

from apps.inventory.models import Node
from apps.telemetry import ingest
from apps.telemetry.cursors import stored_seqs
from apps.telemetry.models import AgentEvent, NodeGpuSample, TelemetryCursor

# An ack waits for its batch to commit; the product's 250 ms window only slows the tests down.
FLUSH_INTERVAL_MS = 20


class StoredTelemetry:
    """What storage holds for a node, read from its rows."""

    @staticmethod
    @database_sync_to_async
    def sample_times(node: Node) -> list[float]:
        """The timestamps of the node's stored samples, oldest first (the tests' agents send one per seq)."""
        times = NodeGpuSample.objects.filter(node=node).order_by("ts").values_list("ts", flat=True).distinct()
        return [ts.timestamp() for ts in times]

    @staticmethod
    @database_sync_to_async
    def events(node: Node) -> list[tuple[str, int | None, int | None]]:
        """The node's stored events as (kind, GPU index, XID), in the order stored."""
        return list(AgentEvent.objects.filter(node=node).order_by("id").values_list("kind", "gpu_index", "xid"))

    @staticmethod
    @database_sync_to_async
    def cursors(node: Node) -> tuple[int, int]:
        """The highest telemetry and events seq stored for the node."""
        return stored_seqs([node.pk])[node.pk]

    @staticmethod
    @database_sync_to_async
    def stored_elsewhere(node: Node, *, telemetry_seq: int, events_seq: int) -> None:
        """The node's cursor as another server process left it, before this test's process saw the node."""
        TelemetryCursor.objects.create(
            node=node, telemetry_seq=telemetry_seq, events_seq=events_seq, updated_at=timezone.now()
        )


@pytest_asyncio.fixture
async def storage(settings: Settings) -> AsyncIterator[StoredTelemetry]:
    """The process's ingestor, fresh for the test (no memory of other tests' nodes), shut down after it."""
    settings.TELEMETRY_FLUSH_INTERVAL_MS = FLUSH_INTERVAL_MS  # read when a batch starts
    await ingest.ingestor.shutdown()  # forgets what an earlier test's nodes stored
    yield StoredTelemetry()
    await ingest.ingestor.shutdown()  # writes what is pending, closes its writer thread's connection
