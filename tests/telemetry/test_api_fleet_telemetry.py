"""GET /api/v1/telemetry/fleet: the fleet's utilization and power minute by minute over the last hour."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts.roles import Role
from apps.telemetry.models import NodeMinuteRollup
from apps.telemetry.rollups import Stats, stats_of
from tests.telemetry.conftest import rollup

pytestmark = pytest.mark.django_db


def gpu(*, util: float | None, power: float, samples: int = 60) -> Stats:
    means = {"power_w": (power, power, power)} | ({"util_gpu": (util, util, util)} if util is not None else {})
    return stats_of(samples, means)


def test_each_minute_sums_the_gpus_power_and_weights_utilization_by_samples(api_client, make_node):
    a, b = make_node(), make_node()
    now = timezone.now().replace(second=0, microsecond=0)
    first, second = now - timedelta(minutes=10), now - timedelta(minutes=9)
    NodeMinuteRollup.objects.bulk_create(
        [
            rollup(
                NodeMinuteRollup,
                a,
                first,
                {
                    0: gpu(util=90.0, power=600.0, samples=60),
                    1: gpu(util=30.0, power=300.0, samples=20),  # fewer samples weigh less
                },
            ),
            rollup(NodeMinuteRollup, b, first, {0: gpu(util=None, power=100.0)}),  # no utilization: not in the mean
            rollup(NodeMinuteRollup, a, second, {0: gpu(util=10.0, power=200.0)}),
            rollup(NodeMinuteRollup, a, now - timedelta(minutes=61), {0: gpu(util=99.0, power=999.0)}),  # too old
        ]
    )

    response = api_client(Role.VIEWER).get("/api/v1/telemetry/fleet")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["step_s"] == 60
    assert body["points"] == [
        {"ts": int(first.timestamp()), "gpus": 3, "util_gpu_mean": 75.0, "power_w_total": 1000.0},
        {"ts": int(second.timestamp()), "gpus": 1, "util_gpu_mean": 10.0, "power_w_total": 200.0},
    ]


def test_an_empty_fleet_has_no_points(api_client):
    assert api_client(Role.VIEWER).get("/api/v1/telemetry/fleet").json()["points"] == []
