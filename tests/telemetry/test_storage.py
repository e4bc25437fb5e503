"""The bulk writer: rows, cursors and newest samples in one transaction, dedup by seq."""

import threading
from datetime import UTC, datetime

import pytest
from django.db import DatabaseError, connection

from agents.protocol import GpuSample, NodeSample, PortSample, Telemetry
from apps.telemetry import seqlog
from apps.telemetry.cursors import reset_seqs, stored_seqs
from apps.telemetry.models import (
    GPU_FIELDS,
    PORT_SAMPLE_FIELDS,
    LatestGpuSample,
    LatestPortSample,
    NodeGpuSample,
    NodePortSample,
    TelemetryCursor,
)
from apps.telemetry.storage import Submission, write_batch
from tests.telemetry.conftest import T0, every_gpu_field, every_port_field, gpu_sample, telemetry

pytestmark = pytest.mark.django_db
postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="the cursors' log is PostgreSQL's")


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def gpu_samples(node) -> int:
    return NodeGpuSample.objects.filter(node=node).item_count()


def telemetry_seqs() -> dict[int, int]:
    """Each node's stored telemetry cursor, as a Welcome reads it (on PostgreSQL: row and log)."""
    return {node_id: telemetry_seq for node_id, (telemetry_seq, _) in stored_seqs().items()}


def in_another_process(work) -> None:
    """Run ``work`` as another server process would: another thread, its own connection and memory."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:
            failures.append(error)
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert failures == []


def test_it_stores_every_protocol_field():
    assert set(GPU_FIELDS) == set(GpuSample.__struct_fields__)
    assert set(PORT_SAMPLE_FIELDS) == set(PortSample.__struct_fields__)


def test_it_stores_one_row_per_node_and_sample_with_every_gpu_and_port(make_node):
    a, b = make_node(), make_node()
    result = write_batch([Submission(a.pk, telemetry(1, samples=3)), Submission(b.pk, telemetry(7, gpus=4))])
    assert (result.gpu_rows, result.port_rows) == (3 * 8 + 4, 4)
    assert NodeGpuSample.objects.filter(node=a).count() == 3
    assert (gpu_samples(a), gpu_samples(b)) == (24, 4)
    assert NodePortSample.objects.filter(node=a).item_count() == 3
    assert result.cursors == {a.pk: 1, b.pk: 7}
    assert telemetry_seqs() == {a.pk: 1, b.pk: 7}


def test_it_gives_back_every_field_as_sent_and_absent_fields_still_absent(make_node):
    """Through the writer and the database and back: every field of every GPU and port, at its extremes,
    and GPUs and ports that report only some fields (or none but their index)."""
    node = make_node()
    gpus = [every_gpu_field(0), every_gpu_field(1, high=True), GpuSample(index=5), gpu_sample(7, temp_c=-12.25)]
    ports = [every_port_field("mlx5_0"), every_port_field("mlx5_1", high=True), PortSample("ib0", 2, "down")]
    sent = NodeSample(ts=T0 + 0.125, gpus=gpus, ports=ports)
    write_batch([Submission(node.pk, Telemetry(seq=1, samples=[sent]))])
    row = NodeGpuSample.objects.get(node=node)
    assert (row.ts, row.readings()) == (at(T0 + 0.125), gpus)
    assert row.readings()[2] == GpuSample(index=5)  # every field absent, the GPU still there
    assert NodePortSample.objects.get(node=node).readings() == ports
    assert row.received_at is not None


def newest_utils(node) -> set[tuple[datetime, float]]:
    """The node's newest GPU row: its time and its GPUs' utilizations."""
    row = LatestGpuSample.objects.get(node=node)
    return {(row.ts, gpu.util_gpu) for gpu in row.readings()}


def test_it_keeps_one_newest_row_per_node_holding_the_raw_rows_bytes(make_node):
    node = make_node()
    write_batch([Submission(node.pk, telemetry(1, samples=5, util=10.0))])
    write_batch([Submission(node.pk, telemetry(2, ts=T0 + 60, util=90.0))])
    latest = LatestGpuSample.objects.get(node=node)
    assert len(latest.readings()) == 8
    assert newest_utils(node) == {(at(T0 + 60), 90.0)}
    assert bytes(latest.gpus) == bytes(NodeGpuSample.objects.get(node=node, ts=at(T0 + 60)).gpus)


def test_it_keeps_one_newest_row_per_port_never_moving_back_in_time(make_node):
    node = make_node()
    message = telemetry(1, samples=3)
    message.samples[2].ports[0].tx_gbps = 99.0
    write_batch([Submission(node.pk, message)])
    write_batch([Submission(node.pk, telemetry(2, ts=T0 - 600))])  # a replay of older samples
    latest = LatestPortSample.objects.get(node=node)
    [port] = latest.readings()
    assert (port.device, port.port, latest.ts, port.tx_gbps) == ("mlx5_0", 1, at(T0 + 2), 99.0)
    assert port.symbol_errors is None


def test_it_stores_a_ports_data_counters_raw_and_newest(make_node):
    node = make_node()
    message = telemetry(1, samples=2)
    for i, sample in enumerate(message.samples):
        sample.ports[0].tx_bytes, sample.ports[0].rx_bytes = 2**40 + i, 1000 * i
    write_batch([Submission(node.pk, message)])
    rows = NodePortSample.objects.filter(node=node).order_by("ts")
    assert [(row.readings()[0].tx_bytes, row.readings()[0].rx_bytes) for row in rows] == [(2**40, 0), (2**40 + 1, 1000)]
    [port] = LatestPortSample.objects.get(node=node).readings()
    assert (port.tx_bytes, port.rx_bytes) == (2**40 + 1, 1000)


def test_it_refreshes_newest_rows_only_of_nodes_due_for_it(make_node):
    due, skipped = make_node(), make_node()
    write_batch([Submission(due.pk, telemetry(1)), Submission(skipped.pk, telemetry(1))])
    result = write_batch(
        [Submission(due.pk, telemetry(2, ts=T0 + 5, util=80.0)), Submission(skipped.pk, telemetry(2, ts=T0 + 4))],
        latest_not_before={due.pk: T0 + 5, skipped.pk: T0 + 5},
    )
    assert result.latest_ts == {due.pk: T0 + 5}
    assert newest_utils(due) == {(at(T0 + 5), 80.0)}
    assert LatestGpuSample.objects.get(node=skipped).ts == at(T0)
    assert gpu_samples(skipped) == 16  # raw rows are always stored


def test_it_never_moves_the_newest_row_back_in_time(make_node):
    node = make_node()
    write_batch([Submission(node.pk, telemetry(5, ts=T0 + 600, util=70.0))])
    write_batch([Submission(node.pk, telemetry(6, ts=T0, util=20.0))])  # a replayed backlog, newer seq
    assert newest_utils(node) == {(at(T0 + 600), 70.0)}
    assert gpu_samples(node) == 16


def test_it_drops_a_seq_at_or_below_the_cursor(make_node):
    node = make_node()
    write_batch([Submission(node.pk, telemetry(1)), Submission(node.pk, telemetry(2, ts=T0 + 1))])
    again = write_batch([Submission(node.pk, telemetry(2, ts=T0 + 1)), Submission(node.pk, telemetry(1))])
    assert again.duplicates == 2
    assert again.stored == []
    assert again.cursors == {node.pk: 2}
    assert gpu_samples(node) == 16


def test_it_keeps_two_new_messages_of_one_node_and_drops_a_repeat_within_the_batch(make_node):
    node = make_node()
    result = write_batch(
        [
            Submission(node.pk, telemetry(4)),
            Submission(node.pk, telemetry(5, ts=T0 + 1)),
            Submission(node.pk, telemetry(5, ts=T0 + 1)),
        ]
    )
    assert [s.message.seq for s in result.stored] == [4, 5]
    assert result.duplicates == 1
    assert gpu_samples(node) == 16
    assert telemetry_seqs() == {node.pk: 5}


@pytest.mark.django_db(transaction=True)
def test_it_reads_the_cursor_the_database_holds_not_a_copy(make_node):
    """Another process stored up to seq 9: this one must not store 8 again."""
    node = make_node()
    write_batch([Submission(node.pk, telemetry(3))])
    in_another_process(lambda: write_batch([Submission(node.pk, telemetry(9, ts=T0 + 9))]))
    result = write_batch([Submission(node.pk, telemetry(8)), Submission(node.pk, telemetry(10))])
    assert [s.message.seq for s in result.stored] == [10]
    assert result.cursors == {node.pk: 10}


def test_a_cursor_is_claimed_once_a_batch_and_never_moves_back(make_node):
    node, new = make_node(), make_node()
    write_batch([Submission(node.pk, telemetry(7))])
    result = write_batch([Submission(node.pk, telemetry(3)), Submission(new.pk, telemetry(2))])  # 3: a replay
    assert (result.duplicates, [s.node_id for s in result.stored]) == (1, [new.pk])
    assert result.cursors == {node.pk: 7, new.pk: 2}
    assert stored_seqs() == {node.pk: (7, 0), new.pk: (2, 0)}  # 7 not moved back by the replay
    result = write_batch([Submission(node.pk, telemetry(9, ts=T0 + 9)), Submission(node.pk, telemetry(8, ts=T0 + 8))])
    assert [s.message.seq for s in result.stored] == [9, 8]  # both new: each seq above what was stored
    assert telemetry_seqs()[node.pk] == 9


def test_the_newest_row_is_the_batchs_newest_sample_the_first_of_its_time(make_node):
    """A GPU missing from the newest sample is missing from the newest row (pages look for its last
    reading in the raw rows: tests/dashboard/test_streams.py)."""
    node = make_node()
    older, newer = telemetry(1, ts=T0, util=10.0), telemetry(2, ts=T0 + 1, gpus=4, util=20.0)
    same_time = telemetry(3, ts=T0 + 1, util=30.0)  # as new as the newer one: the first of that time stays
    result = write_batch([Submission(node.pk, older), Submission(node.pk, newer), Submission(node.pk, same_time)])
    assert result.latest_ts == {node.pk: T0 + 1}
    assert LatestGpuSample.objects.get(node=node).readings() == newer.samples[0].gpus


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fold_rows", [seqlog.FOLD_ROWS, 2], ids=["log-unfolded", "folded-often"])
def test_two_writers_storing_the_same_replay_store_each_message_once(make_node, monkeypatch, fold_rows):
    """Two server processes given the same nodes' messages (an agent's replay after it reconnected to
    the other), in opposite node orders: each message goes in once, and neither writer deadlocks or
    fails; also when (on PostgreSQL) each folds the log under the other, rows it never read among them."""
    monkeypatch.setattr(seqlog, "FOLD_ROWS", fold_rows)
    nodes = [make_node() for _ in range(60)]
    batches = [[Submission(n.pk, telemetry(seq, ts=T0 + seq, gpus=1)) for n in nodes] for seq in range(1, 11)]
    stored: list[list[tuple[int, int]]] = [[], []]
    failures: list[BaseException] = []

    def writer(index: int) -> None:
        try:
            for batch in batches:
                result = write_batch(batch if index == 0 else batch[::-1])
                stored[index] += [(s.node_id, s.message.seq) for s in result.stored]
        except BaseException as error:
            failures.append(error)
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=writer, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert sorted(stored[0] + stored[1]) == sorted((n.pk, seq) for n in nodes for seq in range(1, 11))
    assert all(gpu_samples(n) == 10 for n in nodes)
    assert set(telemetry_seqs().values()) == {10}


def test_a_reset_makes_every_writer_forget_what_it_remembers(make_node):
    """A new credential resets a node's seqs to 0: its agent's next seq 1 is new, though this writer
    (on PostgreSQL remembering the node's cursor at 7) stored up to 7 before."""
    node = make_node()
    write_batch([Submission(node.pk, telemetry(7))])
    assert reset_seqs(node.pk, 0, 0, at(T0)) == (7, 0)
    result = write_batch([Submission(node.pk, telemetry(1, ts=T0 + 60))])
    assert ([s.message.seq for s in result.stored], result.cursors) == ([1], {node.pk: 1})
    assert stored_seqs([node.pk]) == {node.pk: (1, 0)}


@postgresql_only
def test_the_log_is_folded_into_the_cursor_rows_and_stays_short(make_node, monkeypatch):
    monkeypatch.setattr(seqlog, "FOLD_ROWS", 3)
    nodes = [make_node() for _ in range(4)]
    for seq in range(1, 11):
        write_batch([Submission(n.pk, telemetry(seq, ts=T0 + seq)) for n in nodes[: 2 + seq % 3]])
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {seqlog.LOG_TABLE}")
        assert cursor.fetchone()[0] <= 4  # folded every few rows, not kept
    in_rows = dict(TelemetryCursor.objects.values_list("node_id", "telemetry_seq"))
    assert 0 < in_rows[nodes[0].pk] <= 10  # rows advanced by folds, the newest batches still in the log
    assert telemetry_seqs() == {nodes[0].pk: 10, nodes[1].pk: 10, nodes[2].pk: 10, nodes[3].pk: 8}
    assert stored_seqs([nodes[3].pk, nodes[2].pk]) == {nodes[3].pk: (8, 0), nodes[2].pk: (10, 0)}


@postgresql_only
def test_a_replay_is_dropped_on_the_databases_word_not_on_a_writers_memory_alone(make_node, caplog):
    """A writer whose memory of a cursor is wrong (however it came to be) must not drop new messages
    as replays: a message is dropped only once the database confirms it was stored."""
    node = make_node()
    write_batch([Submission(node.pk, telemetry(1))])
    write_batch([Submission(node.pk, telemetry(2, ts=T0 + 2))])  # the writer now remembers the node at 1
    seqlog._memory_of(connection.alias).exact[node.pk] = 99  # wrong, as a stale memory would be
    result = write_batch([Submission(node.pk, telemetry(3, ts=T0 + 3)), Submission(node.pk, telemetry(2))])
    assert ([s.message.seq for s in result.stored], result.duplicates) == ([3], 1)  # 2 confirmed stored
    assert "remembered wrongly" in caplog.text
    result = write_batch([Submission(node.pk, telemetry(4, ts=T0 + 4))])  # the memory learnt afresh
    assert ([s.message.seq for s in result.stored], telemetry_seqs()) == ([4], {node.pk: 4})


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_log_made_again_from_its_first_id_is_read_afresh(make_node, caplog):
    """The log and its state made again (a migration undone and redone, as the migration tests do): a
    writer that had read far into the old log must read the new one from its start, not its own
    batch's row among it, which would make the batch's messages look stored before."""
    old = make_node()
    for seq in range(1, 6):
        write_batch([Submission(old.pk, telemetry(seq, ts=T0 + seq))])
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {seqlog.LOG_TABLE}, {seqlog.STATE_TABLE} RESTART IDENTITY")
    node = make_node()
    result = write_batch([Submission(node.pk, telemetry(1))])
    assert ([s.message.seq for s in result.stored], result.cursors) == ([1], {node.pk: 1})
    assert "remembered wrongly" not in caplog.text  # right the first time, not saved by the check
    assert telemetry_seqs()[node.pk] == 1


@pytest.mark.django_db(transaction=True)
def test_it_writes_nothing_when_the_database_refuses_part_of_the_batch(make_node, request):
    node = make_node()
    write_batch([Submission(node.pk, telemetry(1))])
    request.getfixturevalue("refused_newest_ports")  # from the second batch on
    with pytest.raises(DatabaseError):
        write_batch([Submission(node.pk, telemetry(3, ts=T0 + 5)), Submission(node.pk, telemetry(2, ts=T0 + 9))])
    assert gpu_samples(node) == 8
    assert telemetry_seqs() == {node.pk: 1}
    assert LatestGpuSample.objects.get(node=node).ts == at(T0)


def test_it_writes_nothing_for_an_empty_batch():
    result = write_batch([])
    assert result.stored == []
    assert not NodeGpuSample.objects.exists()


def test_it_copies_rows_in_bulk_not_one_by_one(make_node, django_assert_max_num_queries):
    nodes = [make_node() for _ in range(20)]
    batch = [Submission(n.pk, telemetry(1, samples=10)) for n in nodes]
    # claim the cursors, partitions (catalog, lock, create, attach) x2, COPY x2 (or executemany),
    # newest rows (stage, copy, upsert) x2
    with django_assert_max_num_queries(17):
        write_batch(batch)
    assert NodeGpuSample.objects.count() == 20 * 10
    assert NodeGpuSample.objects.item_count() == 20 * 10 * 8
