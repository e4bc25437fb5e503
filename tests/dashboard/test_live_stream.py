"""``ws/live`` end to end: a real uvicorn server, the real Redis channel layer, browsers signed in
with a session cookie. Telemetry is published as apps/dashboard/live.py publishes it (or by the
ingestor itself); node and failure changes by the domain code that makes them."""

import asyncio
import itertools
import json
import time
from datetime import UTC, datetime

import pytest
from django.contrib.sessions.models import Session
from websockets.asyncio.client import connect as connect_async
from websockets.exceptions import ConnectionClosed, InvalidStatus

from agents.protocol import NodeSample
from apps.accounts.models import User
from apps.dashboard import messages
from apps.dashboard.consumers import LiveConsumer
from apps.dashboard.deltas import LiveView
from apps.dashboard.live_streams import live_streams
from apps.failures.events import record_events
from apps.failures.models import Failure
from apps.inventory.models import Node
from apps.telemetry.ingest import Ingestor
from apps.telemetry.models import LatestGpuSample
from tests import factories
from tests.clock import ManualClock
from tests.dashboard.conftest import group_send, session_cookie
from tests.failures.conftest import events, xid
from tests.telemetry.conftest import T0, gpu_sample, telemetry

GPU_FIELDS = {"util_gpu": 50.0, "util_mem": 25.0, "mem_used_mib": 40_000, "temp_c": 60.0, "power_w": 400.0}
ALL_GPU_FIELDS = {**GPU_FIELDS, "sm_clock_mhz": 1980}


@pytest.fixture
def node(transactional_db) -> Node:
    return factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-a")


def sample_at(ts: float, *, utils: dict[int, float] | None = None) -> NodeSample:
    """A sample at ``ts``: every GPU at 50 % unless ``utils`` says."""
    utils = utils or {}
    return NodeSample(ts=ts, gpus=[gpu_sample(i, util=utils.get(i, 50.0), util_mem=25.0) for i in range(8)])


def node_update(node_id: int, ts: float, *, utils: dict[int, float] | None = None) -> dict:
    """The ``telemetry.node`` message of a sample at ``ts``."""
    return messages.node_update(node_id, sample_at(ts, utils=utils))


def fleet_update(*samples: tuple[int, NodeSample]) -> dict:
    return {"type": "telemetry.fleet", "nodes": [messages.fleet_entry(node_id, s.ts, s.gpus) for node_id, s in samples]}


def store_latest(node: Node, ts: float, *, util: float = 50.0) -> None:
    at = datetime.fromtimestamp(ts, tz=UTC)
    factories.latest_gpus(node, at, [dict(ALL_GPU_FIELDS, gpu_index=i, util_gpu=util) for i in range(8)])


def eventually(check, *, timeout: float = 5.0) -> bool:
    """Whether ``check()`` comes true within ``timeout`` (for what the server does on its own thread)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def closing_code(browser) -> int:
    with pytest.raises(ConnectionClosed) as closed:
        browser.receive()
    return closed.value.rcvd.code


# Who may connect ---------------------------------------------------------------------------------


def test_it_closes_a_browser_that_is_not_signed_in_with_4401(open_browser):
    refused = live_streams.stats.refused["SIGNED_OUT"]
    assert closing_code(open_browser()) == 4401
    assert live_streams.stats.refused["SIGNED_OUT"] == refused + 1


def test_it_refuses_a_page_from_another_origin_before_the_socket_opens(open_browser, viewer):
    with pytest.raises(InvalidStatus) as refused:
        open_browser(viewer, origin="http://evil.example")
    assert refused.value.response.status_code == 403


def test_it_closes_a_deactivated_users_socket_with_4403_on_their_next_message(open_browser, viewer):
    browser = open_browser(viewer)
    assert browser.request({"subscribe": "fleet"})["type"] == "snapshot"
    User.objects.filter(pk=viewer.pk).update(is_active=False)
    browser.send({"subscribe": "fleet"})
    assert closing_code(browser) == 4403


def test_it_closes_a_deactivated_users_socket_with_4403_while_it_only_listens(open_browser, viewer, monkeypatch):
    monkeypatch.setattr(LiveConsumer, "recheck_s", 0.2)
    browser = open_browser(viewer)
    assert browser.request({"subscribe": "fleet"})["type"] == "snapshot"
    User.objects.filter(pk=viewer.pk).update(is_active=False)
    assert closing_code(browser) == 4403


def test_it_closes_with_4401_once_the_session_has_ended(open_browser, viewer):
    browser = open_browser(viewer)
    assert browser.request({"subscribe": "fleet"})["type"] == "snapshot"
    Session.objects.all().delete()  # signed out (elsewhere) or expired and cleared
    browser.send({"subscribe": "fleet"})
    assert closing_code(browser) == 4401


# Snapshots -----------------------------------------------------------------------------------------


def test_it_answers_a_fleet_subscription_with_every_nodes_summary(open_browser, viewer, node):
    quiet = factories.node(node.cluster, node.node_type, "gpu-b", lifecycle="new")
    store_latest(node, T0, util=40.0)
    record_events(node.pk, events(xid(79, at=T0), xid(48, gpu=1, at=T0)))

    snapshot = open_browser(viewer).request({"subscribe": "fleet"})

    assert snapshot == {
        "type": "snapshot",
        "stream": "fleet",
        "nodes": {
            str(node.pk): {
                "hostname": "gpu-a",
                "lifecycle": "in_service",
                "liveness": "unknown",
                "alarms": 2,
                "severity": "critical",
                "alarm_gpus": [0, 1],
                "straggler_gpus": [],
                "ts": T0,
                "gpus": 8,
                "util_gpu_mean": 40.0,
                "power_w_total": 3200.0,
                "temp_c_max": 60.0,
                "heat": [[40, 400, 60, 39]] * 8,
            },
            str(quiet.pk): {
                "hostname": "gpu-b",
                "lifecycle": "new",
                "liveness": "unknown",
                "alarms": 0,
                "severity": None,
                "alarm_gpus": [],
                "straggler_gpus": [],
            },
        },
    }


def test_it_answers_a_node_subscription_with_its_gpus_and_active_failures(open_browser, viewer, node):
    store_latest(node, T0)
    record_events(node.pk, events(xid(79, gpu=2, at=T0)))
    failure = Failure.objects.get()

    snapshot = open_browser(viewer).request({"subscribe": "node", "node": node.pk})

    assert (snapshot["type"], snapshot["stream"], snapshot["node"]) == ("snapshot", "node", node.pk)
    state = snapshot["state"]
    assert (state["hostname"], state["lifecycle"], state["alarms"], state["severity"]) == (
        "gpu-a",
        "in_service",
        1,
        "critical",
    )
    assert state["ts"] == T0
    assert state["gpus"] == {str(i): ALL_GPU_FIELDS | {"ts": T0} for i in range(8)}  # each GPU's own ts
    assert list(state["failures"]) == [str(failure.pk)]
    assert {"code": "xid-79", "gpu_index": 2, "state": "open", "count": 1}.items() <= state["failures"][
        str(failure.pk)
    ].items()


# Deltas ----------------------------------------------------------------------------------------------


def test_it_sends_a_node_only_the_values_that_changed(open_browser, viewer, node):
    browser = open_browser(viewer)
    assert browser.request({"subscribe": "node", "node": node.pk})["state"]["gpus"] == {}

    group_send(messages.node_group(node.pk), node_update(node.pk, T0))
    first = browser.receive()
    assert first == {
        "type": "delta",
        "nodes": {str(node.pk): {"ts": T0, "gpus": {str(i): ALL_GPU_FIELDS | {"ts": T0} for i in range(8)}}},
    }

    group_send(messages.node_group(node.pk), node_update(node.pk, T0 + 1, utils={3: 75.0}))
    second = browser.receive()
    reported = {str(i): {"ts": T0 + 1} for i in range(8)}  # every GPU reported again, GPU 3 with a new value
    reported["3"]["util_gpu"] = 75.0
    assert second == {"type": "delta", "nodes": {str(node.pk): {"ts": T0 + 1, "gpus": reported}}}


def test_it_sends_the_fleet_only_the_nodes_and_fields_that_changed(open_browser, viewer, node):
    other = factories.node(node.cluster, node.node_type, "gpu-b")
    browser = open_browser(viewer)
    browser.request({"subscribe": "fleet"})

    group_send(messages.FLEET_GROUP, fleet_update((node.pk, sample_at(T0)), (other.pk, sample_at(T0))))
    first = browser.receive()["fleet"]
    assert first[str(other.pk)] == {
        "ts": T0,
        "gpus": 8,
        "util_gpu_mean": 50.0,
        "power_w_total": 3200.0,
        "temp_c_max": 60.0,
        "heat": [[50, 400, 60, 39]] * 8,
    }

    group_send(messages.FLEET_GROUP, fleet_update((node.pk, sample_at(T0 + 1, utils={0: 90.0}))))  # other: unchanged
    assert browser.receive() == {
        "type": "delta",
        "fleet": {
            str(node.pk): {"ts": T0 + 1, "util_gpu_mean": 55.0, "heat": [[90, 400, 60, 39]] + [[50, 400, 60, 39]] * 7}
        },
    }


@pytest.fixture
def clock(monkeypatch) -> ManualClock:
    """The consumers' clock, moved by the test: when deltas go is the pacing's to say (test_pacing.py),
    and these tests check that the consumer goes by it."""
    manual = ManualClock(100.0)
    monkeypatch.setattr(LiveConsumer, "clock", manual)
    return manual


def test_a_burst_of_updates_goes_at_most_once_a_second_with_the_newest_values(open_browser, viewer, node, clock):
    browser = open_browser(viewer)
    browser.request({"subscribe": "node", "node": node.pk})  # the snapshot is the second's message
    last_message_at, seq = clock.now(), itertools.count()

    for _ in range(2):  # two bursts of five updates a tenth of a second apart
        for _ in range(5):
            clock.advance_to(clock.now() + 0.1)
            i, waits = next(seq), clock.waits
            group_send(messages.node_group(node.pk), node_update(node.pk, T0 + i, utils={0: 10.0 * (i + 1)}))
            due = clock.waited_for(after=waits)  # the update is taken in; the delta waits for this
        assert due >= last_message_at + 1.0
        clock.advance_to(due)
        newest = browser.receive()["nodes"][str(node.pk)]
        assert (newest["ts"], newest["gpus"]["0"]["util_gpu"]) == (T0 + i, 10.0 * (i + 1))
        last_message_at = due


def test_a_snapshot_counts_as_the_seconds_message(open_browser, viewer, node, clock):
    other = factories.node(node.cluster, node.node_type, "gpu-b")
    browser = open_browser(viewer)
    browser.request({"subscribe": "node", "node": node.pk})
    clock.advance_to(101.1)  # over a second after that snapshot

    waits = clock.waits
    group_send(messages.node_group(node.pk), node_update(node.pk, T0))
    due = clock.waited_for(after=waits)
    assert due < 101.2  # on its own, the delta would go within the coalescing window ...
    waits = clock.waits
    browser.request({"subscribe": "node", "node": other.pk})  # ... but this snapshot goes first
    clock.advance_to(due)
    due = clock.waited_for(after=waits)

    assert due >= 101.1 + 1.0
    clock.advance_to(due)
    assert list(browser.receive()["nodes"]) == [str(node.pk)]


def test_a_delta_that_cannot_be_sent_is_a_warning_counted_and_the_socket_stays(
    open_browser, viewer, node, clock, monkeypatch, caplog
):
    def broken_take_delta(view: LiveView) -> dict:  # the fault: a bug in building the delta
        raise RuntimeError("the delta could not be built")

    browser = open_browser(viewer)
    browser.request({"subscribe": "node", "node": node.pk})
    failed = live_streams.stats.failed_pushes
    monkeypatch.setattr(LiveView, "take_delta", broken_take_delta)

    waits = clock.waits
    group_send(messages.node_group(node.pk), node_update(node.pk, T0))
    clock.advance_to(clock.waited_for(after=waits))

    assert eventually(lambda: "Live stream push failed: the delta could not be built" in caplog.text)
    assert eventually(lambda: live_streams.stats.failed_pushes == failed + 1)
    assert browser.request({"subscribe": "fleet"})["type"] == "snapshot"


def test_it_stops_sending_a_stream_once_unsubscribed(open_browser, viewer, node):
    browser = open_browser(viewer)
    browser.request({"subscribe": "node", "node": node.pk})
    reply = browser.request({"unsubscribe": "node", "node": node.pk})
    assert reply == {"type": "unsubscribed", "stream": "node", "node": node.pk}

    group_send(messages.node_group(node.pk), node_update(node.pk, T0))
    with pytest.raises(TimeoutError):
        browser.receive(timeout=1.5)


# Node and failure changes ----------------------------------------------------------------------------


def test_a_lifecycle_change_reaches_the_nodes_and_the_fleets_subscribers(open_browser, viewer, node):
    browser = open_browser(viewer)
    browser.request({"subscribe": "fleet"})
    browser.request({"subscribe": "node", "node": node.pk})

    node.transition("quarantined", actor="alice", reason="XID 79 on gpu2")

    delta = browser.receive()
    assert delta["fleet"][str(node.pk)] == {"lifecycle": "quarantined"}
    assert delta["nodes"][str(node.pk)] == {"lifecycle": "quarantined"}


def test_a_new_failure_and_its_resolution_reach_a_subscribed_browser(open_browser, viewer, node):
    browser = open_browser(viewer)
    browser.request({"subscribe": "fleet"})
    browser.request({"subscribe": "node", "node": node.pk})

    record_events(node.pk, events(xid(79, gpu=2, at=T0)))
    failure = Failure.objects.get()
    delta = browser.receive()
    assert delta["fleet"][str(node.pk)] == {"alarms": 1, "severity": "critical", "alarm_gpus": [2]}
    change = delta["nodes"][str(node.pk)]
    assert (change["alarms"], change["severity"]) == (1, "critical")
    assert {"id": failure.pk, "code": "xid-79", "state": "open"}.items() <= change["failures"][str(failure.pk)].items()

    failure.resolve(actor="alice", note="GPU reseated")
    delta = browser.receive()
    assert delta["fleet"][str(node.pk)] == {"alarms": 0, "severity": None, "alarm_gpus": []}
    assert delta["nodes"][str(node.pk)]["failures"][str(failure.pk)]["state"] == "resolved"


def test_the_failures_feed_carries_every_failure_change_whole(open_browser, viewer, node):
    browser = open_browser(viewer)
    assert browser.request({"subscribe": "failures"}) == {"type": "snapshot", "stream": "failures"}

    record_events(node.pk, events(xid(79, gpu=2, at=T0)))
    failure = Failure.objects.get()
    delta = browser.receive()
    assert list(delta) == ["type", "failures"]
    payload = delta["failures"][str(failure.pk)]
    assert (payload["hostname"], payload["state"], payload["count"]) == (node.hostname, "open", 1)

    record_events(node.pk, events(xid(79, gpu=2, at=T0 + 5), seq=2))  # a repeat: the node's alarms stay the same
    assert browser.receive()["failures"][str(failure.pk)]["count"] == 2
    failure.acknowledge(actor="alice")
    payload = browser.receive()["failures"][str(failure.pk)]
    assert (payload["state"], payload["acknowledged_by"], payload["count"]) == ("acknowledged", "alice", 2)


def test_it_stops_sending_the_failures_feed_once_unsubscribed(open_browser, viewer, node):
    browser = open_browser(viewer)
    browser.request({"subscribe": "failures"})
    assert browser.request({"unsubscribe": "failures"}) == {"type": "unsubscribed", "stream": "failures"}

    record_events(node.pk, events(xid(79, gpu=2, at=T0)))
    with pytest.raises(TimeoutError):
        browser.receive(timeout=1.5)


# Bad messages ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("subscribe fleet", "malformed"),
        ('{"subscribe": "fleet"', "malformed"),
        ("[1, 2]", "invalid"),
        ({"subscribe": "fleet", "since": 0}, "invalid"),
        ({"subscribe": "everything"}, "invalid"),
        ({"subscribe": 1}, "invalid"),
        ({"subscribe": "node", "node": "7"}, "invalid"),
        ({"subscribe": "node", "node": True}, "invalid"),
        ({"subscribe": "node", "node": 0}, "invalid"),
        ({"subscribe": "node"}, "invalid"),
        ({"subscribe": "fleet", "node": 7}, "invalid"),
        ({"subscribe": "failures", "node": 7}, "invalid"),
        ({"subscribe": "fleet", "unsubscribe": "fleet"}, "invalid"),
        ({}, "invalid"),
        ({"subscribe": "node", "node": 987_654_321}, "unknown_node"),
        (json.dumps({"subscribe": "fleet", "padding": "x" * 5000}), "oversize"),
        (b'{"subscribe": "fleet"}', "binary"),
    ],
)
def test_it_answers_a_bad_message_with_an_error_and_keeps_the_socket(open_browser, viewer, message, reason):
    browser = open_browser(viewer)
    rejected = live_streams.stats.rejected[reason]

    error = browser.request(message)

    assert (error["type"], error["reason"]) == ("error", reason)
    assert error["message"]
    assert live_streams.stats.rejected[reason] == rejected + 1
    assert browser.request({"subscribe": "fleet"})["type"] == "snapshot"


def test_it_names_the_field_at_fault(open_browser, viewer):
    error = open_browser(viewer).request({"subscribe": "node", "node": "7"})
    assert "$.node" in error["message"]


def test_it_holds_at_most_twenty_nodes_per_browser(open_browser, viewer, node):
    nodes = [factories.node(node.cluster, node.node_type) for _ in range(20)]
    browser = open_browser(viewer)
    for n in nodes:
        assert browser.request({"subscribe": "node", "node": n.pk})["type"] == "snapshot"

    error = browser.request({"subscribe": "node", "node": node.pk})

    assert error["reason"] == "too_many_nodes"
    assert browser.request({"unsubscribe": "node", "node": nodes[0].pk})["type"] == "unsubscribed"
    assert browser.request({"subscribe": "node", "node": node.pk})["type"] == "snapshot"


# From the ingestor -----------------------------------------------------------------------------------


def test_telemetry_stored_by_the_ingestor_reaches_a_browser_watching_the_node(asgi_server, viewer, node):
    cookie = session_cookie(viewer)

    async def watch_while_ingesting() -> dict:
        headers = {"Cookie": f"sessionid={cookie}"}
        async with connect_async(
            asgi_server.url("/ws/live"), origin=asgi_server.origin, additional_headers=headers
        ) as ws:
            await ws.send(json.dumps({"subscribe": "node", "node": node.pk}))
            assert json.loads(await ws.recv())["type"] == "snapshot"
            ingestor = Ingestor(flush_interval_s=0.05)  # announces to the live publisher, as in the server
            try:
                await ingestor.submit(node.pk, telemetry(1, ts=T0, util=64.0))
                return json.loads(await asyncio.wait_for(ws.recv(), 5))
            finally:
                await ingestor.shutdown()

    delta = asyncio.run(watch_while_ingesting())

    assert delta["type"] == "delta"
    change = delta["nodes"][str(node.pk)]
    assert (change["ts"], change["gpus"]["7"]["util_gpu"]) == (T0, 64.0)
    assert len(LatestGpuSample.objects.get(node=node).readings()) == 8
