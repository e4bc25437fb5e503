"""The ingestor: batching across nodes, dedup by seq, results only after commit, errors to every
submitter, and what each committed batch stored announced to the seam's subscribers."""

import asyncio
from collections.abc import Iterator

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections

from apps.core import events
from apps.core.events import TelemetryStored
from apps.telemetry.cursors import stored_seqs
from apps.telemetry.ingest import LATEST_REFRESH_S, Ingestor
from apps.telemetry.models import LatestGpuSample, NodeGpuSample
from tests.clock import ManualClock
from tests.telemetry.conftest import T0, telemetry

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@pytest_asyncio.fixture(autouse=True)
async def close_connections_of_sync_to_async_thread():
    yield
    await sync_to_async(connections.close_all)()  # or the test database cannot be dropped


@pytest.fixture
def announced() -> Iterator[list[TelemetryStored]]:
    """What the ingest announces, heard as the live publisher and the telemetry watch hear it."""
    heard: list[TelemetryStored] = []
    events.subscribe(TelemetryStored, heard.append)
    yield heard
    events.unsubscribe(TelemetryStored, heard.append)


def ingestor(**options) -> Ingestor:
    options.setdefault("flush_interval_s", 0.05)
    return Ingestor(**options)


def seqs(announcement: TelemetryStored) -> list[tuple[int, int]]:
    return [(node_id, message.seq) for node_id, message in announcement.messages]


@sync_to_async
def stored_rows(node_id: int) -> int:
    return NodeGpuSample.objects.filter(node_id=node_id).item_count()


@sync_to_async
def cursor_of(node_id: int) -> int | None:
    stored = stored_seqs([node_id]).get(node_id)
    return stored[0] if stored else None


async def test_it_writes_many_nodes_submissions_as_one_batch(make_node, announced):
    nodes = [await sync_to_async(make_node)() for _ in range(3)]
    ing = ingestor()
    acks = await asyncio.gather(*(ing.submit(n.pk, telemetry(i + 1)) for i, n in enumerate(nodes)))
    assert acks == [1, 2, 3]
    assert ing.stats.batches == 1
    assert [seqs(batch) for batch in announced] == [[(n.pk, i + 1) for i, n in enumerate(nodes)]]
    assert [await stored_rows(n.pk) for n in nodes] == [8, 8, 8]
    await ing.shutdown()


async def test_it_answers_only_after_the_rows_and_cursor_are_committed(make_node):
    node = await sync_to_async(make_node)()
    ing = ingestor()
    assert await ing.submit(node.pk, telemetry(5, samples=2)) == 5
    assert await stored_rows(node.pk) == 16
    assert await cursor_of(node.pk) == 5
    await ing.shutdown()


async def test_it_flushes_at_once_when_a_batch_reaches_its_row_limit(make_node):
    node = await sync_to_async(make_node)()
    ing = ingestor(flush_interval_s=30.0, max_rows=18)  # 2 messages x (8 GPUs + 1 port)
    acks = await asyncio.wait_for(
        asyncio.gather(ing.submit(node.pk, telemetry(1)), ing.submit(node.pk, telemetry(2, ts=T0 + 1))), timeout=5
    )
    assert acks == [2, 2]
    await ing.shutdown()


async def test_it_splits_a_backlog_into_batches_of_at_most_the_row_limit(make_node, announced):
    node = await sync_to_async(make_node)()
    ing = ingestor(max_rows=20)
    await asyncio.gather(*(ing.submit(node.pk, telemetry(seq, ts=T0 + seq)) for seq in range(1, 7)))
    assert [len(batch.messages) for batch in announced] == [2, 2, 2]
    assert await stored_rows(node.pk) == 48
    await ing.shutdown()


async def test_it_flushes_once_the_interval_is_up_without_reaching_the_row_limit(make_node):
    node = await sync_to_async(make_node)()
    clock = ManualClock()
    ing = ingestor(flush_interval_s=0.2, max_rows=10_000, clock=clock)
    waits = clock.waits
    ack = asyncio.ensure_future(ing.submit(node.pk, telemetry(1)))

    due = await asyncio.to_thread(clock.waited_for, after=waits)
    assert due == pytest.approx(clock.now() + 0.2)
    assert not ack.done()
    assert await stored_rows(node.pk) == 0
    clock.advance_to(due)

    assert await asyncio.wait_for(ack, 10) == 1
    assert await stored_rows(node.pk) == 8
    await ing.shutdown()


async def test_it_refreshes_a_nodes_newest_rows_every_few_seconds_not_every_sample(make_node):
    node = await sync_to_async(make_node)()
    ing = ingestor()

    @sync_to_async
    def latest_ts() -> set[float]:
        return {row.ts.timestamp() for row in LatestGpuSample.objects.filter(node_id=node.pk)}

    await ing.submit(node.pk, telemetry(1, ts=T0))
    await ing.submit(node.pk, telemetry(2, ts=T0 + 1))
    assert await latest_ts() == {T0}
    await ing.submit(node.pk, telemetry(3, ts=T0 + LATEST_REFRESH_S))
    assert await latest_ts() == {T0 + LATEST_REFRESH_S}
    await ing.shutdown()


async def test_it_drops_a_repeated_seq_without_writing_it_again(make_node):
    node = await sync_to_async(make_node)()
    ing = ingestor()
    assert await ing.submit(node.pk, telemetry(1)) == 1
    assert await ing.submit(node.pk, telemetry(1)) == 1
    assert ing.stats.batches == 1
    assert await stored_rows(node.pk) == 8
    await ing.shutdown()


async def test_it_drops_what_another_process_stored_before_a_reconnect(make_node, announced):
    """The agent reconnects to another server process and replays seqs 1-3; 1-2 were stored."""
    node = await sync_to_async(make_node)()
    first = ingestor()
    await asyncio.gather(first.submit(node.pk, telemetry(1)), first.submit(node.pk, telemetry(2, ts=T0 + 1)))
    await first.shutdown()
    second = ingestor()
    replay = [second.submit(node.pk, telemetry(seq, ts=T0 + seq - 1)) for seq in (1, 2, 3)]
    assert await asyncio.gather(*replay) == [3, 3, 3]
    assert seqs(announced[-1]) == [(node.pk, 3)]
    assert second.stats.duplicates == 2
    assert await stored_rows(node.pk) == 24
    await second.shutdown()


async def test_it_stores_a_nodes_messages_in_order_and_reports_the_highest(make_node, announced):
    node = await sync_to_async(make_node)()
    ing = ingestor()
    results = await asyncio.gather(*(ing.submit(node.pk, telemetry(seq, ts=T0 + seq)) for seq in (1, 2, 3)))
    assert results == [3, 3, 3]
    assert [seqs(batch) for batch in announced] == [[(node.pk, 1), (node.pk, 2), (node.pk, 3)]]
    assert await cursor_of(node.pk) == 3
    await ing.shutdown()


async def test_it_gives_every_submitter_of_a_failed_batch_the_error_and_stores_nothing(
    make_node, announced, refused_newest_ports, monkeypatch
):
    good_node, bad_node = await sync_to_async(make_node)(), await sync_to_async(make_node)()
    ing = ingestor()
    results = await asyncio.gather(
        ing.submit(good_node.pk, telemetry(1)), ing.submit(bad_node.pk, telemetry(1)), return_exceptions=True
    )
    assert all(isinstance(r, DatabaseError) for r in results), results
    assert announced == []
    assert ing.stats.failed_batches == 1
    assert await stored_rows(good_node.pk) == 0
    assert await cursor_of(good_node.pk) is None
    monkeypatch.undo()  # the database takes batches again: the agent's resend is stored
    assert await ing.submit(good_node.pk, telemetry(1)) == 1
    assert await stored_rows(good_node.pk) == 8
    await ing.shutdown()


async def test_it_stores_a_message_whose_submitter_went_away(make_node):
    node = await sync_to_async(make_node)()
    ing = ingestor(flush_interval_s=0.2)
    task = asyncio.ensure_future(ing.submit(node.pk, telemetry(1)))
    await asyncio.sleep(0.01)
    task.cancel()
    await ing.shutdown()
    assert await stored_rows(node.pk) == 8


async def test_it_keeps_what_is_pending_when_its_flusher_has_to_be_restarted(make_node):
    node = await sync_to_async(make_node)()
    ing = ingestor(flush_interval_s=0.1)
    first = asyncio.ensure_future(ing.submit(node.pk, telemetry(1)))
    await asyncio.sleep(0.01)
    ing._flusher.cancel()  # as an event-loop shutdown or a bug would
    await asyncio.sleep(0.01)
    assert await ing.submit(node.pk, telemetry(2, ts=T0 + 1)) == 2
    assert await first == 2
    assert await stored_rows(node.pk) == 16
    await ing.shutdown()


async def test_it_writes_what_is_pending_when_closed(make_node):
    node = await sync_to_async(make_node)()
    ing = ingestor(flush_interval_s=60.0)
    pending = asyncio.ensure_future(ing.submit(node.pk, telemetry(4)))
    await asyncio.sleep(0.01)
    await ing.shutdown()
    assert await pending == 4


async def test_used_again_after_a_shutdown_it_starts_afresh_from_what_the_database_holds(make_node, announced):
    node = await sync_to_async(make_node)()
    ing = ingestor()
    assert await ing.submit(node.pk, telemetry(1)) == 1
    await ing.shutdown()
    assert await ing.submit(node.pk, telemetry(1)) == 1  # not remembered: the cursor says it is stored
    assert await ing.submit(node.pk, telemetry(2, ts=T0 + 1)) == 2
    assert [seqs(batch) for batch in announced] == [[(node.pk, 1)], [(node.pk, 2)]]  # a duplicate is not news
    assert ing.stats.duplicates == 1
    assert await stored_rows(node.pk) == 16
    await ing.shutdown()
