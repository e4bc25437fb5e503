"""Retention: raw samples 48 h, minute rollups 90 days, hourly rollups forever. On PostgreSQL whole days
are dropped (test_partitions.py); on SQLite rows are deleted in batches."""

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from agents.protocol import GpuSample, PortSample
from apps.telemetry import tasks
from apps.telemetry.models import NodeGpuSample, NodeHourRollup, NodeMinuteRollup, NodePortSample
from apps.telemetry.retention import apply_retention
from apps.telemetry.rollups import stats_of
from controlplane.celery import app
from tests.telemetry.conftest import T0, rollup

pytestmark = pytest.mark.django_db
sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="PostgreSQL drops whole days instead")

NOW = datetime.fromtimestamp(T0, UTC) + timedelta(days=200, hours=12)  # midday


def raw_at(node, moment: datetime) -> NodeGpuSample:
    return NodeGpuSample.of(node.pk, moment, [GpuSample(index=0, util_gpu=1.0)], moment)


def port_at(node, moment: datetime) -> NodePortSample:
    return NodePortSample.of(node.pk, moment, [PortSample(device="mlx5_0", port=1, state="active")], moment)


def rollup_at(model, node, moment: datetime):
    return rollup(model, node, moment, {0: stats_of(1, {})})


def times(model, column: str = "ts") -> list[datetime]:
    return sorted(model.objects.values_list(column, flat=True))


def test_it_removes_what_is_past_retention_and_keeps_what_is_not(make_node):
    node = make_node()
    old, recent = NOW - timedelta(days=4), NOW - timedelta(hours=47)
    NodeGpuSample.objects.bulk_create([raw_at(node, old), raw_at(node, recent)])
    NodePortSample.objects.bulk_create([port_at(node, old), port_at(node, recent)])
    NodeMinuteRollup.objects.bulk_create(rollup_at(NodeMinuteRollup, node, NOW - timedelta(days=d)) for d in (92, 89))
    NodeHourRollup.objects.bulk_create(rollup_at(NodeHourRollup, node, NOW - timedelta(days=d)) for d in (1, 400, 4000))
    apply_retention(NOW)
    assert times(NodeGpuSample) == times(NodePortSample) == [recent]
    assert times(NodeMinuteRollup, "bucket") == [NOW - timedelta(days=89)]
    assert NodeHourRollup.objects.count() == 3  # kept forever


@sqlite_only
def test_it_deletes_rows_older_than_the_raw_retention_and_keeps_the_boundary(make_node):
    node = make_node()
    cutoff = NOW - timedelta(hours=48)
    NodeGpuSample.objects.bulk_create(raw_at(node, cutoff + timedelta(seconds=s)) for s in (-3600, -1, 0, 1))
    NodePortSample.objects.bulk_create(port_at(node, cutoff + timedelta(seconds=s)) for s in (-1, 0))
    report = apply_retention(NOW)
    assert (report.deleted["telemetry_nodegpusample"], report.deleted["telemetry_nodeportsample"]) == (2, 1)
    assert times(NodeGpuSample) == [cutoff, cutoff + timedelta(seconds=1)]
    assert times(NodePortSample) == [cutoff]


@sqlite_only
@override_settings(TELEMETRY_RAW_RETENTION_HOURS=1, TELEMETRY_MINUTE_RETENTION_DAYS=2)
def test_it_follows_the_configured_retention(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create(
        [raw_at(node, NOW - timedelta(minutes=61)), raw_at(node, NOW - timedelta(minutes=59))]
    )
    NodeMinuteRollup.objects.bulk_create([rollup_at(NodeMinuteRollup, node, NOW - timedelta(days=d)) for d in (3, 1)])
    assert apply_retention(NOW).deleted == {
        "telemetry_nodegpusample": 1,
        "telemetry_nodeportsample": 0,
        "telemetry_nodeminuterollup": 1,
    }


@sqlite_only
def test_it_deletes_in_batches_until_nothing_old_is_left(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create(raw_at(node, NOW - timedelta(days=3, seconds=s)) for s in range(25))
    NodeGpuSample.objects.bulk_create(raw_at(node, NOW - timedelta(seconds=s)) for s in range(5))
    assert apply_retention(NOW, batch_rows=4).deleted["telemetry_nodegpusample"] == 25
    assert NodeGpuSample.objects.count() == 5


@sqlite_only
def test_it_stops_when_its_time_budget_is_spent(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create(raw_at(node, NOW - timedelta(days=3, seconds=s)) for s in range(10))
    assert apply_retention(NOW, batch_rows=2, time_budget_s=0).deleted["telemetry_nodegpusample"] == 0
    assert NodeGpuSample.objects.count() == 10


TASKS = (tasks.roll_up_minutes, tasks.roll_up_hours, tasks.apply_retention, tasks.create_partitions)


def test_the_tasks_run_on_the_telemetry_queue_with_time_limits():
    for task in TASKS:
        assert app.amqp.router.route({}, task.name)["queue"].name == "telemetry"
        assert 0 < task.soft_time_limit < task.time_limit
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {t.name for t in TASKS} <= scheduled


def test_the_tasks_do_their_work_when_run(make_node):
    node = make_node()
    NodeGpuSample.objects.bulk_create([raw_at(node, datetime(2020, 1, 1, tzinfo=UTC))])
    report = tasks.apply_retention.apply().get()
    if connection.vendor == "postgresql":
        assert "telemetry_nodegpusample_20200101" in report["dropped"]
    else:
        assert report["deleted"]["telemetry_nodegpusample"] == 1
    assert not NodeGpuSample.objects.exists()
    assert tasks.roll_up_minutes.apply().get()["minute_rows"] == 0
    assert tasks.roll_up_hours.apply().get()["hour_rows"] == 0
    assert isinstance(tasks.create_partitions.apply().get(), list)
