"""Rollups: exact aggregates, idempotent windows, hours weighted by sample count, late data."""

from datetime import UTC, datetime, timedelta

import pytest

from agents.protocol import GpuSample
from apps.telemetry.models import NodeGpuSample, NodeHourRollup, NodeMinuteRollup, RollupProgress
from apps.telemetry.rollups import (
    floor_to,
    roll_up_completed_hours,
    roll_up_received,
    rollup_hours,
    rollup_minutes,
    stats_of,
)
from tests.telemetry.conftest import T0, rollup, summaries

pytestmark = pytest.mark.django_db

START = datetime.fromtimestamp(T0, UTC)  # 2026-01-01 00:00 UTC
NOW = START + timedelta(hours=3)


def raw(node, second: float, *gpus: GpuSample, received: datetime | None = None) -> NodeGpuSample:
    ts = START + timedelta(seconds=second)
    return NodeGpuSample.of(node.pk, ts, list(gpus), received or ts)


def util(index: int, value: float | None, **metrics) -> GpuSample:
    return GpuSample(index=index, util_gpu=value, **metrics)


def minute_rows(node) -> list[tuple]:
    """(bucket, GPU, samples, util min, mean, max) of the node's minute rollups."""
    return [
        (row.bucket, gpu, stats["samples"], *(stats["util_gpu"] or (None, None, None)))
        for row in NodeMinuteRollup.objects.filter(node=node).order_by("bucket")
        for gpu, stats in sorted(summaries(row).items())
    ]


def hour_of(node) -> dict[int, dict]:
    return summaries(NodeHourRollup.objects.get(node=node))


def test_it_rolls_raw_samples_into_exact_minute_min_mean_max(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create(
        raw(node, s, util(0, float(s), mem_used_mib=1000 + s), *([util(1, 100.0)] if s < 60 and s % 2 == 0 else []))
        for s in range(120)
    )
    assert rollup_minutes(START, START + timedelta(minutes=2), now=NOW) == 2  # one row per node and minute
    assert minute_rows(node) == [
        (START, 0, 60, 0.0, 29.5, 59.0),
        (START, 1, 30, 100.0, 100.0, 100.0),
        (START + timedelta(minutes=1), 0, 60, 60.0, 89.5, 119.0),
    ]
    first = summaries(NodeMinuteRollup.objects.get(node=node, bucket=START))
    assert first[0]["mem_used_mib"] == (1000, 1029.5, 1059)
    assert first[1]["power_w"] is None  # absent, not zero


def test_it_keeps_the_fleet_columns_of_each_minute(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create(
        raw(node, s, util(0, 90.0, power_w=600.0), util(1, None, power_w=300.0)) for s in range(60)
    )
    rollup_minutes(START, START + timedelta(minutes=1), now=NOW)
    row = NodeMinuteRollup.objects.get(node=node)
    assert (row._gpus, row._util_gpu_total, row._util_gpu_samples, row._power_w_total) == (2, 90.0 * 60, 60, 900.0)


def test_it_gives_the_same_rows_when_a_window_is_rolled_again(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create(raw(node, s, *(util(g, float(s % 7)) for g in range(4))) for s in range(180))
    rollup_minutes(START, START + timedelta(minutes=3), now=NOW)
    before = minute_rows(node)
    assert rollup_minutes(START + timedelta(seconds=30), START + timedelta(minutes=2, seconds=10), now=NOW) == 3
    assert minute_rows(node) == before
    assert len(before) == 12


def test_it_picks_up_samples_that_arrived_after_a_minute_was_rolled(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create(raw(node, s, util(0, 10.0)) for s in range(30))
    rollup_minutes(START, START + timedelta(minutes=1), now=NOW)
    NodeGpuSample.objects.bulk_create(raw(node, s, util(0, 40.0)) for s in range(30, 60))
    rollup_minutes(START, START + timedelta(minutes=1), now=NOW)
    assert minute_rows(node) == [(START, 0, 60, 10.0, 25.0, 40.0)]


def test_it_leaves_other_nodes_alone_when_rolling_some(make_node):
    a, b = make_node(), make_node()
    NodeGpuSample.objects.bulk_create(raw(n, s, util(0, 1.0)) for n in (a, b) for s in range(60))
    rollup_minutes(START, START + timedelta(minutes=1), now=NOW)
    NodeGpuSample.objects.filter(node=b).delete()
    NodeGpuSample.objects.bulk_create(raw(b, s, util(0, 9.0)) for s in range(60))
    rollup_minutes(START, START + timedelta(minutes=1), node_ids=[a.pk], now=NOW)
    assert minute_rows(b)[0][4] == 1.0


def test_it_never_recomputes_minutes_whose_raw_samples_retention_has_removed(make_node):
    node = make_node()
    NodeMinuteRollup.objects.bulk_create([rollup(NodeMinuteRollup, node, START, {0: stats_of(60, {})})])
    later = START + timedelta(hours=49)  # raw retention is 48 h: those samples are gone
    assert rollup_minutes(START, START + timedelta(minutes=1), now=later) == 0
    assert NodeMinuteRollup.objects.filter(node=node).count() == 1


def minute(node, offset_min: int, count: int, mean: float | None, low: float | None = None, high: float | None = None):
    means = {"util_gpu": (low if low is not None else mean, mean, high if high is not None else mean)}
    power = {"power_w": (300.0, 300.0, 300.0)} if offset_min == 0 else {}
    stats = stats_of(count, (means if mean is not None else {}) | power)
    return rollup(NodeMinuteRollup, node, START + timedelta(minutes=offset_min), {0: stats})


def test_it_weighs_minute_means_by_their_sample_counts_in_an_hour(make_node):
    node = make_node()
    NodeMinuteRollup.objects.bulk_create(
        [minute(node, 0, 60, 10.0, low=2.0), minute(node, 1, 20, 50.0, high=97.0), minute(node, 59, 20, None)]
    )
    assert rollup_hours(START, START + timedelta(hours=1), now=NOW) == 1
    hour = hour_of(node)[0]
    assert NodeHourRollup.objects.get(node=node).bucket == START
    assert hour["samples"] == 100
    assert hour["util_gpu"] == (2.0, 20.0, 97.0)  # (600 + 1000) / 80
    assert hour["power_w"] == (300.0, 300.0, 300.0)  # only the minute that had power weighs
    rollup_hours(START, START + timedelta(hours=1), now=NOW)
    assert NodeHourRollup.objects.filter(node=node).count() == 1


def every_minute_until(end: datetime) -> None:
    """The beat schedule: a minute pass each minute (the hourly pass is left to the test)."""
    now = RollupProgress.objects.get(name="minute").position
    while now < end:
        now += timedelta(minutes=1)
        roll_up_received(now)


def test_the_minute_pass_rolls_what_was_received_since_the_last_pass(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create(raw(node, 3600 + s, util(0, 20.0)) for s in range(120))
    now = START + timedelta(hours=1, minutes=3)
    report = roll_up_received(now)
    assert report.minute_rows == 2
    assert RollupProgress.objects.get(name="minute").position == now - timedelta(seconds=30)
    assert roll_up_received(now).minute_rows == 0  # nothing new received


def test_the_minute_pass_starts_at_the_oldest_row_and_catches_up_thirty_minutes_at_a_time(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create(raw(node, m * 60, util(0, 1.0)) for m in range(90))
    now = START + timedelta(hours=2)
    assert [roll_up_received(now).minute_rows for _ in range(4)] == [30, 30, 30, 0]
    assert RollupProgress.objects.get(name="minute").position == now - timedelta(seconds=30)
    assert NodeMinuteRollup.objects.filter(node=node).count() == 90


def test_the_minute_pass_rolls_a_late_backlog_and_updates_its_already_rolled_hour(make_node):
    live, replaying = make_node(), make_node()
    NodeGpuSample.objects.bulk_create(raw(n, s, util(0, 10.0)) for n in (live, replaying) for s in range(60))
    roll_up_received(START + timedelta(minutes=2))
    roll_up_completed_hours(START + timedelta(hours=1, minutes=10))
    assert hour_of(replaying)[0]["util_gpu"][1] == 10.0
    every_minute_until(START + timedelta(hours=2))
    # Two hours in, the second node replays the rest of that first hour from its buffer.
    arrived = START + timedelta(hours=2)
    NodeGpuSample.objects.bulk_create(raw(replaying, 60 + s, util(0, 70.0), received=arrived) for s in range(60))
    report = roll_up_received(arrived + timedelta(minutes=1))
    assert report.windows == [
        ((START + timedelta(minutes=1)).isoformat(), (START + timedelta(minutes=2)).isoformat(), 1)
    ]
    assert NodeMinuteRollup.objects.filter(node=replaying).count() == 2
    assert hour_of(replaying)[0]["util_gpu"][1] == 40.0
    assert hour_of(live)[0]["util_gpu"][1] == 10.0


def test_the_hourly_pass_rolls_only_completed_hours_once(make_node):
    node = make_node()
    NodeMinuteRollup.objects.bulk_create([minute(node, m, 60, float(m)) for m in range(0, 150, 10)])
    RollupProgress.objects.create(name="hour", position=START)
    now = START + timedelta(hours=2, minutes=4)  # 01:00-02:00 ended only 4 minutes ago: not yet
    assert roll_up_completed_hours(now).hour_rows == 1
    assert list(NodeHourRollup.objects.values_list("bucket", flat=True)) == [START]
    assert roll_up_completed_hours(now).hour_rows == 0
    assert roll_up_completed_hours(now + timedelta(minutes=2)).hour_rows == 1
    assert NodeHourRollup.objects.count() == 2


def test_it_floors_to_whole_minutes_and_hours():
    moment = START + timedelta(hours=5, minutes=7, seconds=31, microseconds=5)
    assert floor_to(moment, timedelta(minutes=1)) == START + timedelta(hours=5, minutes=7)
    assert floor_to(moment, timedelta(hours=1)) == START + timedelta(hours=5)
