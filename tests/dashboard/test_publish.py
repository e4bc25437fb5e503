"""Node and failure changes reach the live streams' groups in the real Redis channel layer once
committed, once per change however many repeats one transaction holds, as the committed rows say;
the committing thread never waits for the sends; a channel layer that fails never fails the change."""

import asyncio
import dataclasses
import logging
import threading

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction

from apps.dashboard import publish
from apps.dashboard.live_streams import live_streams
from apps.dashboard.loops import LoopThread
from apps.failures.events import record_events
from apps.failures.models import Failure
from apps.gateway.sinks import announce_liveness
from apps.inventory.models import Node
from tests import factories
from tests.dashboard.conftest import listen, waiting
from tests.failures.conftest import events, xid

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


class BrokenLayer:
    async def group_send(self, group: str, message: dict) -> None:
        raise ConnectionError("Redis is away")


@pytest.fixture
def node(transactional_db):
    return factories.node(factories.cluster(), factories.node_type(nics=0))


def publish_through(monkeypatch, layer: object) -> None:
    """The publisher's loop sends through ``layer`` instead of its own Redis layer."""
    start = LoopThread.start

    def start_with_layer(name: str) -> LoopThread:
        return dataclasses.replace(start(name), layer=layer)

    monkeypatch.setattr(publish.LoopThread, "start", start_with_layer)


async def sent() -> None:
    """Wait until the publisher has sent what the changes so far noted."""
    await sync_to_async(live_streams.changes.flush, thread_sensitive=False)()


async def listen_to(node: Node) -> tuple[str, str, str]:
    channels = await listen(f"node.{node.pk}", "fleet", "failures")
    return channels[f"node.{node.pk}"], channels["fleet"], channels["failures"]


async def test_a_lifecycle_change_is_sent_to_the_node_and_the_fleet_once_committed(redis_channel_layer, node):
    to_node, to_fleet, _ = await listen_to(node)

    @sync_to_async
    def transition_looking_before_the_commit() -> list[dict]:
        with transaction.atomic():
            node.transition("drained", actor="alice", reason="maintenance")
            return async_to_sync(waiting)(to_node)

    assert await transition_looking_before_the_commit() == []
    await sent()
    state = {"hostname": node.hostname, "lifecycle": "drained", "liveness": "unknown"}
    message = {"type": "node.state", "node": node.pk, "state": state}
    assert await waiting(to_node) == [message]
    assert await waiting(to_fleet) == [message]


async def test_what_is_sent_is_the_committed_state_not_the_callers_copy(redis_channel_layer, node):
    to_node, _, _ = await listen_to(node)
    stale = await sync_to_async(Node.objects.get)(pk=node.pk)  # e.g. the gateway's, read when the agent connected
    await sync_to_async(node.transition)("drained", actor="alice", reason="maintenance")
    await sent()

    @sync_to_async
    def come_online() -> None:
        Node.objects.filter(pk=node.pk).update(liveness="online")
        announce_liveness(stale)

    await come_online()
    await sent()

    drained = {"hostname": node.hostname, "lifecycle": "drained", "liveness": "unknown"}
    assert [message["state"] for message in await waiting(to_node)] == [drained, {**drained, "liveness": "online"}]


async def test_a_change_rolled_back_is_never_sent(redis_channel_layer, node):
    to_node, to_fleet, _ = await listen_to(node)

    @sync_to_async
    def transition_then_fail() -> None:
        with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012  (the failing request is the point)
            node.transition("drained", actor="alice", reason="maintenance")
            raise RuntimeError("the request failed after the transition")

    await transition_then_fail()
    await sent()
    assert await waiting(to_node) == []
    assert await waiting(to_fleet) == []


async def test_an_xid_storm_in_one_transaction_is_sent_once_with_its_final_count(redis_channel_layer, node):
    to_node, to_fleet, to_failures = await listen_to(node)

    await sync_to_async(record_events)(node.pk, events(*[xid(13, at=1_767_225_600 + i) for i in range(20)]))

    failure = await sync_to_async(Failure.objects.get)()
    await sent()
    (update,) = await waiting(to_node)
    assert update["type"] == "failure.update"
    assert (update["failure"]["id"], update["failure"]["count"]) == (failure.pk, 20)
    alarms = {"alarms": 1, "severity": failure.severity, "alarm_gpus": [0], "straggler_gpus": []}
    assert update["state"] == alarms
    assert await waiting(to_fleet) == [{"type": "node.state", "node": node.pk, "state": alarms}]
    assert await waiting(to_failures) == [update]


async def test_an_acknowledgement_is_sent_to_the_node_and_the_failures_feed_and_leaves_the_fleet_alone(
    redis_channel_layer, node
):
    await sync_to_async(record_events)(node.pk, events(xid(79)))
    await sent()
    to_node, to_fleet, to_failures = await listen_to(node)

    failure = await sync_to_async(Failure.objects.get)()
    await sync_to_async(failure.acknowledge)(actor="alice")
    await sent()

    assert [message["failure"]["state"] for message in await waiting(to_node)] == ["acknowledged"]
    assert [message["failure"]["state"] for message in await waiting(to_failures)] == ["acknowledged"]
    assert await waiting(to_fleet) == []  # the node's alarm count did not change


async def test_a_failing_channel_layer_does_not_fail_the_change(monkeypatch, node, caplog):
    publish_through(monkeypatch, BrokenLayer())
    failed = live_streams.changes.failed_sends

    with caplog.at_level(logging.WARNING, logger="apps.dashboard.publish"):
        await sync_to_async(node.transition)("drained", actor="alice", reason="maintenance")
        await sent()

    await sync_to_async(node.refresh_from_db)()
    assert node.lifecycle == "drained"
    assert "Redis is away" in caplog.text
    assert live_streams.changes.failed_sends == failed + 2  # the node's group and the fleet


class StalledLayer:
    """Redis that answers only when told to."""

    def __init__(self) -> None:
        self.answer = threading.Event()
        self.sent: list[tuple[str, dict]] = []

    async def group_send(self, group: str, message: dict) -> None:
        await asyncio.to_thread(self.answer.wait)
        self.sent.append((group, message))


async def test_the_committing_thread_does_not_wait_for_the_sends(monkeypatch, node):
    """At a fleet's connect the gateway's admission thread commits the liveness of hundreds of agents
    at once: its Welcomes must not wait on a read and two Redis round trips per node."""
    stalled = StalledLayer()
    publish_through(monkeypatch, stalled)

    await sync_to_async(node.transition)("drained", actor="alice", reason="maintenance")  # returns: not stalled
    assert stalled.sent == []

    stalled.answer.set()
    await sent()
    assert [group for group, _ in stalled.sent] == [f"node.{node.pk}", "fleet"]
