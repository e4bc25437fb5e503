"""Daily partitions on PostgreSQL: created ahead by a scheduled task, made by the writer for a day nobody
made, dropped whole by retention with nothing else touched; and a chart that spans two of them."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from agents.protocol import GpuSample
from apps.telemetry.models import NodeGpuSample, NodeHourRollup, NodeMinuteRollup, NodePortSample
from apps.telemetry.partitions import existing_days
from apps.telemetry.queries import WINDOWS, node_series
from apps.telemetry.retention import apply_retention, create_partitions_ahead
from apps.telemetry.rollups import stats_of
from apps.telemetry.storage import Submission, write_batch
from tests.telemetry.conftest import raw, rollup, telemetry

pytestmark = pytest.mark.django_db
postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has no partitions")
PARTITIONED = ("telemetry_nodegpusample", "telemetry_nodeportsample", "telemetry_nodeminuterollup")
NOW = datetime(2030, 6, 10, 12, 0, tzinfo=UTC)


def days(table: str) -> set[date]:
    with connection.cursor() as cursor:
        return existing_days(cursor, table)


def rows_by_partition(table: str) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1")
        return dict(cursor.fetchall())


def sample(node, moment: datetime, util: float = 50.0) -> NodeGpuSample:
    return raw(node, moment, [GpuSample(index=0, util_gpu=util), GpuSample(index=1, util_gpu=util + 1)])


@postgresql_only
def test_a_scheduled_task_creates_today_and_the_next_two_days_of_every_partitioned_table():
    created = create_partitions_ahead(NOW)
    assert created == [f"{table}_{day}" for table in PARTITIONED for day in ("20300610", "20300611", "20300612")]
    for table in PARTITIONED:
        assert {date(2030, 6, 10), date(2030, 6, 11), date(2030, 6, 12)} <= days(table)
    assert create_partitions_ahead(NOW) == []  # already there: nothing to do


@postgresql_only
def test_retention_drops_whole_days_past_retention_and_touches_nothing_else(make_node):
    node = make_node()
    for day in range(6, 11):  # 6 to 10 June, a sample at the start and the end of each day
        for moment in (datetime(2030, 6, day, 0, 0, 1, tzinfo=UTC), datetime(2030, 6, day, 23, 59, 59, tzinfo=UTC)):
            NodeGpuSample.objects.bulk_create([sample(node, moment)])
    minutes = [NOW - timedelta(days=d) for d in (92, 90, 89)]
    NodeMinuteRollup.objects.bulk_create(rollup(NodeMinuteRollup, node, m, {0: stats_of(60, {})}) for m in minutes)
    NodeHourRollup.objects.bulk_create(
        rollup(NodeHourRollup, node, NOW - timedelta(days=d), {0: stats_of(1, {})}) for d in (3, 400)
    )
    before = {table: rows_by_partition(table) for table in (*PARTITIONED, "telemetry_nodehourrollup")}

    with CaptureQueriesContext(connection) as queries:
        report = apply_retention(NOW)

    # Raw samples live 48 h: 6 and 7 June end before 8 June 12:00; 8 June still holds samples to keep.
    assert {"telemetry_nodegpusample_20300606", "telemetry_nodegpusample_20300607"} <= set(report.dropped)
    assert "telemetry_nodegpusample_20300608" not in report.dropped
    assert not [q["sql"] for q in queries if "DELETE" in q["sql"].upper()]  # dropped whole, never deleted
    after = {table: rows_by_partition(table) for table in (*PARTITIONED, "telemetry_nodehourrollup")}
    for table, counts in before.items():
        kept = {name: count for name, count in counts.items() if name not in report.dropped}
        assert after[table] == kept, table  # every partition kept has every row it had
    assert sorted(NodeGpuSample.objects.values_list("ts", flat=True))[0] == datetime(2030, 6, 8, 0, 0, 1, tzinfo=UTC)
    # Minutes live 90 days: the day 92 days back is gone; the day exactly 90 back is not over for retention.
    assert sorted(NodeMinuteRollup.objects.values_list("bucket", flat=True)) == minutes[1:]
    assert NodeHourRollup.objects.count() == 2


@postgresql_only
def test_the_writer_makes_the_partition_of_a_day_nobody_made(make_node):
    node = make_node()
    long_ago = datetime(2018, 3, 1, 9, tzinfo=UTC).timestamp()  # a backlog from a node's old buffer
    write_batch([Submission(node.pk, telemetry(1, ts=long_ago, samples=2))])
    assert date(2018, 3, 1) in days("telemetry_nodegpusample")
    assert date(2018, 3, 1) in days("telemetry_nodeportsample")
    assert rows_by_partition("telemetry_nodegpusample") == {"telemetry_nodegpusample_20180301": 2}


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_writer_whose_day_retention_dropped_makes_it_again_on_the_next_batch(make_node):
    node = make_node()
    ts = datetime(2030, 6, 1, 8, tzinfo=UTC).timestamp()
    write_batch([Submission(node.pk, telemetry(1, ts=ts))])  # committed: this process now knows 1 June
    apply_retention(NOW)  # drops 1 June behind the writer's back
    assert date(2030, 6, 1) not in days("telemetry_nodegpusample")
    with pytest.raises(DatabaseError):
        write_batch([Submission(node.pk, telemetry(2, ts=ts + 1))])
    write_batch([Submission(node.pk, telemetry(2, ts=ts + 1))])  # the agent resends: the day is made again
    assert NodeGpuSample.objects.filter(node=node).count() == 1
    assert NodePortSample.objects.filter(node=node).count() == 1


def test_a_chart_over_midnight_reads_both_days(make_node):
    node = make_node()
    midnight = datetime(2030, 6, 10, tzinfo=UTC)
    NodeGpuSample.objects.bulk_create(
        sample(node, midnight + timedelta(seconds=s), util=float(s % 60)) for s in range(-300, 300, 3)
    )
    series = node_series(node.pk, WINDOWS["15m"], "util_gpu", now=midnight + timedelta(minutes=5))
    times = [t for t, *_ in series["gpus"][0]["points"]]
    assert (times[0], times[-1]) == (int(midnight.timestamp()) - 300, int(midnight.timestamp()) + 297)
    assert len(times) == 200
    assert [gpu["index"] for gpu in series["gpus"]] == [0, 1]
    if connection.vendor == "postgresql":
        assert set(rows_by_partition("telemetry_nodegpusample")) == {
            "telemetry_nodegpusample_20300609",
            "telemetry_nodegpusample_20300610",
        }
