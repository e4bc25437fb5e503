"""GET /api/v1/nodes/{id}/telemetry: per-GPU (t, min, mean, max) series for 15 min, 24 h, 30 days."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from agents.protocol import GpuSample
from apps.accounts.roles import Role
from apps.telemetry.models import NodeGpuSample, NodeHourRollup, NodeMinuteRollup
from apps.telemetry.rollups import stats_of
from tests.telemetry.conftest import raw, rollup

pytestmark = pytest.mark.django_db


def aligned(moment: datetime, step_s: int) -> datetime:
    return datetime.fromtimestamp(moment.timestamp() // step_s * step_s, UTC)


def url(node, **params) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"/api/v1/nodes/{node.pk}/telemetry?{query}"


def test_it_charts_the_last_15_minutes_from_raw_samples_in_3_second_points(api_client, make_node):
    node = make_node()
    base = aligned(timezone.now() - timedelta(minutes=5), 3)
    NodeGpuSample.objects.bulk_create(
        [
            raw(node, base + timedelta(seconds=i), [GpuSample(index=g, util_gpu=10.0 * i + g) for g in (0, 1)])
            for i in range(6)
        ]
        + [raw(node, base - timedelta(minutes=20), [GpuSample(index=0, util_gpu=99.0)])]
    )
    response = api_client(Role.VIEWER).get(url(node, window="15m", metric="util_gpu"))
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["window"], body["metric"], body["unit"], body["source"], body["step_s"]) == (
        "15m",
        "util_gpu",
        "%",
        "raw",
        3,
    )
    assert body["hostname"] == node.hostname
    t = int(base.timestamp())
    assert body["gpus"] == [
        {"index": 0, "points": [[t, 0.0, 10.0, 20.0], [t + 3, 30.0, 40.0, 50.0]]},
        {"index": 1, "points": [[t, 1.0, 11.0, 21.0], [t + 3, 31.0, 41.0, 51.0]]},
    ]


def test_it_charts_24_hours_from_minute_rollups_weighted_by_sample_count(api_client, make_node):
    node = make_node()
    base = aligned(timezone.now() - timedelta(hours=3), 300)
    NodeMinuteRollup.objects.bulk_create(
        [
            rollup(NodeMinuteRollup, node, base, {0: stats_of(60, {"power_w": (300, 400, 500)})}),
            rollup(
                NodeMinuteRollup, node, base + timedelta(minutes=1), {0: stats_of(20, {"power_w": (100, 200, 650)})}
            ),
            rollup(NodeMinuteRollup, node, base - timedelta(hours=25), {0: stats_of(60, {"power_w": (1, 1, 1)})}),
        ]
    )
    body = api_client(Role.VIEWER).get(url(node, window="24h", metric="power_w")).json()
    assert (body["source"], body["step_s"], body["unit"]) == ("minute", 300, "W")
    assert body["gpus"] == [{"index": 0, "points": [[int(base.timestamp()), 100.0, 350.0, 650.0]]}]


def test_it_charts_30_days_from_hourly_rollups(api_client, make_node):
    node = make_node()
    base = aligned(timezone.now() - timedelta(days=10), 7200)
    NodeHourRollup.objects.bulk_create(
        rollup(
            NodeHourRollup, node, base + timedelta(hours=h), {3: stats_of(3600, {"temp_c": (40 + h, 50 + h, 60 + h)})}
        )
        for h in range(2)
    )
    body = api_client(Role.VIEWER).get(url(node, window="30d", metric="temp_c")).json()
    assert (body["source"], body["step_s"]) == ("hour", 7200)
    assert body["gpus"] == [{"index": 3, "points": [[int(base.timestamp()), 40.0, 50.5, 61.0]]}]


def test_it_answers_an_empty_series_for_a_node_without_telemetry(api_client, make_node):
    body = api_client(Role.VIEWER).get(url(make_node())).json()
    assert (body["window"], body["metric"], body["gpus"]) == ("15m", "util_gpu", [])


def test_it_refuses_anonymous_requests(api_client, make_node):
    assert api_client("anonymous").get(url(make_node(), window="15m")).status_code == 401


@pytest.mark.parametrize(("params", "field"), [({"window": "7d"}, "window"), ({"metric": "voltage"}, "metric")])
def test_it_names_the_bad_parameter(api_client, make_node, params, field):
    response = api_client(Role.VIEWER).get(url(make_node(), **params))
    assert response.status_code == 400
    assert field in response.json()


def test_it_answers_404_for_an_unknown_node(api_client, db):
    response = api_client(Role.VIEWER).get("/api/v1/nodes/999999/telemetry")
    assert response.status_code == 404


def test_a_sample_late_in_a_points_interval_falls_in_that_point(api_client, make_node):
    """Times are rounded down to whole seconds by the database, never to the nearest one."""
    node = make_node()
    base = aligned(timezone.now() - timedelta(minutes=5), 3)
    NodeGpuSample.objects.bulk_create(
        [
            raw(node, base + timedelta(seconds=2.75), [GpuSample(index=0, util_gpu=10.0)]),
            raw(node, base + timedelta(seconds=3), [GpuSample(index=0, util_gpu=20.0)]),
        ]
    )
    body = api_client(Role.VIEWER).get(url(node, window="15m", metric="util_gpu")).json()
    t = int(base.timestamp())
    assert body["gpus"] == [{"index": 0, "points": [[t, 10.0, 10.0, 10.0], [t + 3, 20.0, 20.0, 20.0]]}]
