"""Retention: raw samples 48 h, minute rollups 90 days, hourly rollups forever; deleted in batches."""

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.test import override_settings

from apps.telemetry import tasks
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup, GpuSample, PortSample
from apps.telemetry.rollups import apply_retention
from controlplane.celery import app
from tests.telemetry.conftest import T0

pytestmark = pytest.mark.django_db

NOW = datetime.fromtimestamp(T0, UTC) + timedelta(days=200)


def raw_at(node, moment: datetime) -> GpuSample:
    return GpuSample(node=node, gpu_index=0, ts=moment, received_at=moment, util_gpu=1.0)


def port_at(node, moment: datetime) -> PortSample:
    return PortSample(node=node, ts=moment, received_at=moment, device="mlx5_0", port=1, state="active")


def rollup_at(model, node, moment: datetime):
    return model(node=node, gpu_index=0, bucket=moment, sample_count=1)


def test_it_deletes_raw_samples_older_than_the_raw_retention_and_keeps_the_boundary(make_node):
    node = make_node()
    cutoff = NOW - timedelta(hours=48)
    GpuSample.objects.bulk_create(raw_at(node, cutoff + timedelta(seconds=s)) for s in (-3600, -1, 0, 1))
    PortSample.objects.bulk_create(port_at(node, cutoff + timedelta(seconds=s)) for s in (-1, 0))
    deleted = apply_retention(NOW)
    assert (deleted["gpusample"], deleted["portsample"]) == (2, 1)
    assert sorted(GpuSample.objects.values_list("ts", flat=True)) == [cutoff, cutoff + timedelta(seconds=1)]
    assert list(PortSample.objects.values_list("ts", flat=True)) == [cutoff]


def test_it_deletes_minute_rollups_after_90_days_and_keeps_hourly_forever(make_node):
    node = make_node()
    cutoff = NOW - timedelta(days=90)
    GpuMinuteRollup.objects.bulk_create(
        rollup_at(GpuMinuteRollup, node, cutoff + timedelta(minutes=m)) for m in (-1, 0, 1)
    )
    GpuHourRollup.objects.bulk_create(rollup_at(GpuHourRollup, node, NOW - timedelta(days=d)) for d in (1, 400, 4000))
    assert apply_retention(NOW)["gpuminuterollup"] == 1
    assert sorted(GpuMinuteRollup.objects.values_list("bucket", flat=True)) == [cutoff, cutoff + timedelta(minutes=1)]
    assert GpuHourRollup.objects.count() == 3


@override_settings(TELEMETRY_RAW_RETENTION_HOURS=1, TELEMETRY_MINUTE_RETENTION_DAYS=2)
def test_it_follows_the_configured_retention(make_node):
    node = make_node()
    GpuSample.objects.bulk_create(
        [raw_at(node, NOW - timedelta(minutes=61)), raw_at(node, NOW - timedelta(minutes=59))]
    )
    GpuMinuteRollup.objects.bulk_create([rollup_at(GpuMinuteRollup, node, NOW - timedelta(days=d)) for d in (3, 1)])
    assert apply_retention(NOW) == {"gpusample": 1, "portsample": 0, "gpuminuterollup": 1}


def test_it_deletes_in_batches_until_nothing_old_is_left(make_node):
    node = make_node()
    GpuSample.objects.bulk_create(raw_at(node, NOW - timedelta(days=3, seconds=s)) for s in range(25))
    GpuSample.objects.bulk_create(raw_at(node, NOW - timedelta(seconds=s)) for s in range(5))
    assert apply_retention(NOW, batch_rows=4)["gpusample"] == 25
    assert GpuSample.objects.count() == 5


def test_it_stops_when_its_time_budget_is_spent(make_node):
    node = make_node()
    GpuSample.objects.bulk_create(raw_at(node, NOW - timedelta(days=3, seconds=s)) for s in range(10))
    assert apply_retention(NOW, batch_rows=2, time_budget_s=0)["gpusample"] == 0
    assert GpuSample.objects.count() == 10


def test_the_tasks_run_on_the_telemetry_queue_with_time_limits():
    for task in (tasks.roll_up_minutes, tasks.roll_up_hours, tasks.apply_retention):
        assert app.amqp.router.route({}, task.name)["queue"].name == "telemetry"
        assert 0 < task.soft_time_limit < task.time_limit
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {t.name for t in (tasks.roll_up_minutes, tasks.roll_up_hours, tasks.apply_retention)} <= scheduled


def test_the_tasks_do_their_work_when_run(make_node):
    node = make_node()
    GpuSample.objects.bulk_create([raw_at(node, datetime(2020, 1, 1, tzinfo=UTC))])
    assert tasks.apply_retention.apply().get()["gpusample"] == 1
    assert tasks.roll_up_minutes.apply().get()["minute_rows"] == 0
    assert tasks.roll_up_hours.apply().get()["hour_rows"] == 0
