"""Node and failure changes are published once committed, once per change however many repeats one
transaction holds, and a channel layer that fails never fails the change."""

import logging

import pytest
from django.db import transaction

from apps.dashboard import publish
from apps.failures.events import record_events
from apps.failures.models import Failure
from apps.inventory.models import Node
from tests import factories
from tests.failures.conftest import events, xid

pytestmark = pytest.mark.django_db


class RecordingLayer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    async def group_send(self, group: str, message: dict) -> None:
        self.sent.append((group, message))


class BrokenLayer:
    async def group_send(self, group: str, message: dict) -> None:
        raise ConnectionError("Redis is away")


@pytest.fixture
def layer(monkeypatch) -> RecordingLayer:
    recording = RecordingLayer()
    monkeypatch.setattr(publish, "get_channel_layer", lambda: recording)
    return recording


@pytest.fixture
def node(db):
    return factories.node(factories.cluster(), factories.node_type(nics=0))


def test_a_lifecycle_change_is_sent_to_the_node_and_the_fleet_once_committed(
    layer, node, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        node.transition("drained", actor="alice", reason="maintenance")
        assert layer.sent == []  # not before the commit

    state = {"hostname": node.hostname, "lifecycle": "drained", "liveness": "unknown"}
    message = {"type": "node.state", "node": node.pk, "state": state}
    assert layer.sent == [(f"node.{node.pk}", message), ("fleet", message)]


def test_what_is_sent_is_the_committed_state_not_the_callers_copy(layer, node, django_capture_on_commit_callbacks):
    stale = Node.objects.get(pk=node.pk)  # e.g. the gateway's copy, read when the agent connected
    with django_capture_on_commit_callbacks(execute=True):
        node.transition("drained", actor="alice", reason="maintenance")
    layer.sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        Node.objects.filter(pk=node.pk).update(liveness="online")
        publish.publish_node_state(stale)

    state = {"hostname": node.hostname, "lifecycle": "drained", "liveness": "online"}
    assert [message["state"] for _, message in layer.sent] == [state] * 2


def test_a_change_rolled_back_is_never_sent(layer, node, django_capture_on_commit_callbacks):
    def transition_then_fail() -> None:
        with transaction.atomic():
            node.transition("drained", actor="alice", reason="maintenance")
            raise RuntimeError("the request failed after the transition")

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        transition_then_fail()
    assert layer.sent == []


def test_an_xid_storm_in_one_transaction_is_sent_once_with_its_final_count(
    layer, node, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        record_events(node.pk, events(*[xid(13, at=1_767_225_600 + i) for i in range(20)]))

    failure = Failure.objects.get()
    assert [(group, message["type"]) for group, message in layer.sent] == [
        (f"node.{node.pk}", "failure.update"),
        ("fleet", "node.state"),
        ("failures", "failure.update"),
    ]
    assert layer.sent[2][1] == layer.sent[0][1]
    update = layer.sent[0][1]
    assert (update["failure"]["id"], update["failure"]["count"]) == (failure.pk, 20)
    alarms = {"alarms": 1, "severity": failure.severity, "alarm_gpus": [0], "straggler_gpus": []}
    assert update["state"] == alarms
    assert layer.sent[1][1]["state"] == alarms


def test_an_acknowledgement_is_sent_to_the_node_and_the_failures_feed_and_leaves_the_fleet_alone(
    layer, node, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        record_events(node.pk, events(xid(79)))
    layer.sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        Failure.objects.get().acknowledge(actor="alice")

    # the node's alarm count did not change
    assert [(group, message["failure"]["state"]) for group, message in layer.sent] == [
        (f"node.{node.pk}", "acknowledged"),
        ("failures", "acknowledged"),
    ]


def test_a_failing_channel_layer_does_not_fail_the_change(
    monkeypatch, node, django_capture_on_commit_callbacks, caplog
):
    monkeypatch.setattr(publish, "get_channel_layer", BrokenLayer)
    with (
        caplog.at_level(logging.WARNING, logger="apps.dashboard.publish"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        node.transition("drained", actor="alice", reason="maintenance")

    node.refresh_from_db()
    assert node.lifecycle == "drained"
    assert "Redis is away" in caplog.text
