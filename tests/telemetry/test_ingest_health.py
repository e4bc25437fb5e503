"""The ingest's own health in /metrics: each process writes its totals every few seconds, whichever
process is scraped exports every process's, a silent one drops out, and a day-old row is removed."""

from datetime import timedelta

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections
from django.utils import timezone

from apps.telemetry.ingest import HEALTH_WRITE_S, Ingestor, process_name
from apps.telemetry.models import IngestProcess
from tests.clock import ManualClock
from tests.prometheus import scrape, series
from tests.telemetry.conftest import telemetry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest_asyncio.fixture(autouse=True)
async def close_connections_of_sync_to_async_thread():
    yield
    await sync_to_async(connections.close_all)()  # or the test database cannot be dropped


def process_row(process: str, *, age: timedelta, **fields: object) -> IngestProcess:
    totals = dict.fromkeys(("messages", "gpu_samples", "port_samples", "duplicates", "failed_batches"), 1)
    return IngestProcess.objects.create(
        process=process, updated_at=timezone.now() - age, pending_rows=0, **(totals | fields)
    )


@pytest.mark.asyncio
async def test_the_ingestor_writes_its_totals_every_few_seconds(make_node):
    node = await sync_to_async(make_node)()
    gone = await sync_to_async(process_row)("old-host:1", age=timedelta(days=2))
    clock = ManualClock()
    ing = Ingestor(flush_interval_s=0, clock=clock)
    await ing.submit(node.pk, telemetry(1))  # the first batch: its totals are written at once
    await ing.shutdown()  # the writer has done what it had to: the row is in (the ingestor starts again)
    row = await IngestProcess.objects.aget(process=process_name())
    assert (row.messages, row.gpu_samples, row.port_samples, row.duplicates, row.failed_batches) == (1, 8, 1, 0, 0)
    assert row.lag_s >= 100  # the samples are from T0, months ago
    assert row.write_s is not None
    assert not await IngestProcess.objects.filter(process=gone.process).aexists()  # a day silent: removed

    await ing.submit(node.pk, telemetry(2))
    await ing.shutdown()
    assert (await IngestProcess.objects.aget(process=process_name())).messages == 1  # not due yet
    clock.advance_to(clock.now() + HEALTH_WRITE_S)
    await ing.submit(node.pk, telemetry(3))
    await ing.shutdown()
    assert (await IngestProcess.objects.aget(process=process_name())).messages == 3


@pytest.mark.asyncio
async def test_a_batch_the_database_refused_is_counted(make_node):
    node = await sync_to_async(make_node)()

    def refuse(*args, **kwargs):
        raise DatabaseError("disk full")

    ing = Ingestor(flush_interval_s=0, clock=ManualClock(), writer=refuse)
    with pytest.raises(DatabaseError):
        await ing.submit(node.pk, telemetry(1))
    await ing.shutdown()
    row = await IngestProcess.objects.aget(process=process_name())
    assert (row.failed_batches, row.messages, row.write_s) == (1, 0, None)


def test_metrics_export_every_live_process_and_leave_out_a_silent_one(make_node):
    process_row("cp-1:100", age=timedelta(seconds=3), messages=500, gpu_samples=4000, lag_s=0.4, write_s=0.02)
    process_row("cp-2:200", age=timedelta(seconds=4), messages=300, lag_s=None)
    process_row("cp-3:300", age=timedelta(minutes=30))
    parsed = scrape()
    assert series(parsed, "controlplane_ingest_messages_total", "process") == {("cp-1:100",): 500, ("cp-2:200",): 300}
    assert series(parsed, "controlplane_ingest_gpu_samples_total", "process")[("cp-1:100",)] == 4000
    assert parsed["controlplane_ingest_gpu_samples_total"].type == "counter"
    assert series(parsed, "controlplane_ingest_lag_seconds", "process") == {("cp-1:100",): 0.4}  # none: no series
    assert parsed["controlplane_ingest_lag_seconds"].type == "gauge"
    assert "controlplane_ingest_failed_batches_total" in parsed


def test_a_scrape_limited_to_a_cluster_leaves_the_processes_out(make_node):
    node = make_node()
    process_row("cp-1:100", age=timedelta(seconds=3))
    assert "controlplane_ingest_messages_total" in scrape()
    assert "controlplane_ingest_messages_total" not in scrape(node.cluster.name)
