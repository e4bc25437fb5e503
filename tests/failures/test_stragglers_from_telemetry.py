"""Straggler detection reading the window from the raw telemetry samples (apps.telemetry), on both
databases."""

from datetime import UTC, datetime, timedelta

import pytest

from agents.protocol import GpuSample
from apps.failures.models import StragglerFlag
from apps.failures.stragglers import detect_stragglers, load_windows
from apps.telemetry.models import NodeGpuSample
from tests import factories

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def node(db):
    return factories.node(factories.cluster(), factories.node_type(nics=0))


def store(node, *, seconds: int, power_of: dict[int, float], start: datetime = NOW - timedelta(minutes=5)) -> None:
    NodeGpuSample.objects.bulk_create(
        NodeGpuSample.of(
            node.pk,
            start + timedelta(seconds=s),
            [
                GpuSample(index=index, power_w=power + (s % 3) - 1, sm_clock_mhz=1980, util_gpu=97.0)
                for index, power in power_of.items()
            ],
            start + timedelta(seconds=s),
        )
        for s in range(seconds)
    )


def test_it_reads_each_gpus_medians_over_the_window(node):
    store(node, seconds=60, power_of={0: 650.0, 1: 600.0})
    store(node, seconds=60, power_of={0: 100.0}, start=NOW - timedelta(hours=1))  # before the window
    windows = load_windows(NOW - timedelta(minutes=5), NOW)
    assert set(windows) == {node.pk}
    gpu0, gpu1 = windows[node.pk][0], windows[node.pk][1]
    assert gpu0.samples == 60
    assert gpu0.medians == {"power_w": 650.0, "sm_clock_mhz": 1980.0, "util_gpu": 97.0}
    assert gpu1.medians["power_w"] == 600.0


def test_a_pass_over_the_fleet_flags_the_gpu_50_w_below_its_busy_siblings(node):
    store(node, seconds=60, power_of={i: 650.0 for i in range(7)} | {7: 600.0})
    changes = detect_stragglers(NOW)
    assert [(f.node_id, f.gpu_index, f.metric) for f in changes.raised] == [(node.pk, 7, "power_w")]
    assert StragglerFlag.objects.get().failure.title == "Straggler under load"
