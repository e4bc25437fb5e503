"""Agent events: stored once per seq, with each GPU's last XID kept for /metrics."""

import pytest

from agents.protocol import Events, GpuEvent
from apps.telemetry.events import store_events
from apps.telemetry.models import AgentEvent, LatestXid, TelemetryCursor
from tests.telemetry.conftest import T0

pytestmark = pytest.mark.django_db


def events(seq: int, *items: GpuEvent) -> Events:
    return Events(seq=seq, events=list(items))


def xid(gpu: int, code: int, ts: float = T0) -> GpuEvent:
    return GpuEvent(ts=ts, kind="xid", gpu_index=gpu, xid=code, data=f"Xid {code}")


def test_it_stores_events_and_advances_the_events_cursor(make_node):
    node = make_node()
    assert store_events(node.pk, events(1, xid(0, 79), GpuEvent(ts=T0, kind="port", port_device="mlx5_3"))) == (1, True)
    assert AgentEvent.objects.filter(node=node).count() == 2
    assert AgentEvent.objects.get(node=node, kind="port").port_device == "mlx5_3"
    cursor = TelemetryCursor.objects.get(node=node)
    assert (cursor.events_seq, cursor.telemetry_seq) == (1, 0)


def test_it_drops_a_message_whose_seq_is_stored(make_node):
    node = make_node()
    store_events(node.pk, events(3, xid(0, 48)))
    assert store_events(node.pk, events(3, xid(0, 48))) == (3, False)
    assert store_events(node.pk, events(2, xid(1, 48))) == (3, False)
    assert AgentEvent.objects.filter(node=node).count() == 1


def test_it_keeps_the_newest_xid_of_each_gpu(make_node):
    node = make_node()
    store_events(node.pk, events(1, xid(2, 63, T0), xid(2, 64, T0 + 5), xid(5, 74, T0)))
    store_events(node.pk, events(2, xid(5, 79, T0 + 9)))
    store_events(node.pk, events(3, xid(2, 31, T0 + 1)))  # reported late, older than 64
    assert dict(LatestXid.objects.filter(node=node).values_list("gpu_index", "xid")) == {2: 64, 5: 79}
