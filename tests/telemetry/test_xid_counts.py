"""controlplane_gpu_xid_errors_total: every XID each GPU reported, counted as its events are stored,
never twice for a replay, exported whatever the age of the GPU's newest sample."""

import pytest

from agents.protocol import Events, GpuEvent
from apps.inventory.models import Gpu
from apps.telemetry.events import store_events
from apps.telemetry.models import XidCount
from tests.prometheus import scrape, series
from tests.telemetry.conftest import T0

pytestmark = pytest.mark.django_db

FAMILY = "controlplane_gpu_xid_errors_total"


def xids(seq: int, *codes: tuple[int, int], at: float = T0) -> Events:
    """Message ``seq`` with one XID event per (GPU, XID) pair."""
    return Events(
        seq=seq, events=[GpuEvent(ts=at + i, kind="xid", gpu_index=g, xid=x) for i, (g, x) in enumerate(codes)]
    )


def test_it_counts_each_gpus_xids_by_code(make_node):
    node = make_node()
    store_events(node.pk, xids(1, (0, 79), (0, 79), (3, 13)))
    store_events(node.pk, xids(2, (0, 79), (0, 48), at=T0 + 60))
    parsed = scrape()
    assert parsed[FAMILY].type == "counter"
    assert series(parsed, FAMILY, "Hostname", "gpu", "xid") == {
        (node.hostname, "0", "48"): 1,
        (node.hostname, "0", "79"): 3,
        (node.hostname, "3", "13"): 1,
    }
    [sample] = [s for s in parsed[FAMILY].samples if s.labels["gpu"] == "3"]
    assert sample.labels["UUID"] == Gpu.objects.get(node=node, index=3).uuid
    assert sample.labels["cluster"] == node.cluster.name
    assert XidCount.objects.get(node=node, gpu_index=0, xid=79).last_ts.timestamp() == T0 + 60


def test_a_replayed_message_counts_nothing(make_node):
    node = make_node()
    store_events(node.pk, xids(1, (0, 79)))
    store_events(node.pk, xids(1, (0, 79)))
    assert series(scrape(), FAMILY, "xid") == {("79",): 1}


def test_events_that_are_not_xids_are_not_counted(make_node):
    node = make_node()
    store_events(node.pk, Events(seq=1, events=[GpuEvent(ts=T0, kind="ecc", gpu_index=0, data="SBE")]))
    assert FAMILY not in scrape()
