"""The domain-event seam: delivered once committed, never when rolled back, once per transaction
however often announced, and a failing subscriber fails neither the change nor the others."""

import logging

import pytest
from django.db import transaction

from apps.core.events import EventBus, FailureChanged, NodeChanged

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: the transactions are the tests'


def announce_then_fail(bus: EventBus, *events: NodeChanged) -> None:
    """A transaction (a savepoint, inside another) that announces ``events`` and then fails."""
    with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012  (the failing change is the point)
        for event in events:
            bus.announce(event)
        raise RuntimeError("the change failed")


@pytest.fixture
def bus() -> EventBus:
    return EventBus()


@pytest.fixture
def heard(bus: EventBus) -> list[object]:
    received: list[object] = []
    bus.subscribe(NodeChanged, received.append)
    bus.subscribe(FailureChanged, received.append)
    return received


def test_an_event_is_delivered_once_its_transaction_commits(bus, heard):
    with transaction.atomic():
        bus.announce(NodeChanged(7, "lifecycle"))
        assert heard == []
    assert heard == [NodeChanged(7, "lifecycle")]


def test_outside_a_transaction_an_event_is_delivered_at_once(bus, heard):
    bus.announce(NodeChanged(7, "liveness"))
    assert heard == [NodeChanged(7, "liveness")]


def test_an_event_of_a_rolled_back_transaction_is_never_delivered(bus, heard):
    announce_then_fail(bus, NodeChanged(7, "lifecycle"))
    assert heard == []


def test_an_event_of_a_rolled_back_savepoint_is_dropped_and_the_rest_delivered(bus, heard):
    with transaction.atomic():
        bus.announce(NodeChanged(1, "lifecycle"))
        announce_then_fail(bus, NodeChanged(2, "lifecycle"))
    assert heard == [NodeChanged(1, "lifecycle")]


def test_an_event_also_announced_in_a_rolled_back_savepoint_is_delivered_once(bus, heard):
    with transaction.atomic():
        bus.announce(NodeChanged(1, "lifecycle"))
        announce_then_fail(bus, NodeChanged(1, "lifecycle"))
    with transaction.atomic():
        announce_then_fail(bus, NodeChanged(1, "lifecycle"))
        bus.announce(NodeChanged(1, "lifecycle"))
    assert heard == [NodeChanged(1, "lifecycle")] * 2


def test_the_same_event_announced_many_times_in_one_transaction_is_delivered_once_in_order(bus, heard):
    with transaction.atomic():
        for _ in range(50):
            bus.announce(FailureChanged(3, 1, "repeated"))
        bus.announce(NodeChanged(1, "lifecycle"))
        bus.announce(FailureChanged(3, 1, "acknowledged"))
    assert heard == [
        FailureChanged(3, 1, "repeated"),
        NodeChanged(1, "lifecycle"),
        FailureChanged(3, 1, "acknowledged"),
    ]


def test_the_same_event_in_the_next_transaction_is_delivered_again(bus, heard):
    for _ in range(2):
        with transaction.atomic():
            bus.announce(NodeChanged(1, "liveness"))
    assert heard == [NodeChanged(1, "liveness")] * 2


def test_an_event_a_subscriber_announces_is_delivered_once_its_own_transaction_commits(bus, heard):
    def cascade(event: NodeChanged) -> None:
        if event.node_id == 1:
            with transaction.atomic():
                bus.announce(NodeChanged(2, "lifecycle"))

    bus.subscribe(NodeChanged, cascade)
    with transaction.atomic():
        bus.announce(NodeChanged(1, "lifecycle"))
    assert heard == [NodeChanged(1, "lifecycle"), NodeChanged(2, "lifecycle")]


def test_a_failing_subscriber_is_logged_and_counted_and_the_others_still_hear(bus, caplog):
    def broken(event: NodeChanged) -> None:
        raise ConnectionError("Redis is away")

    heard: list[NodeChanged] = []
    bus.subscribe(NodeChanged, broken)
    bus.subscribe(NodeChanged, heard.append)
    with caplog.at_level(logging.WARNING, logger="apps.core.events"), transaction.atomic():
        bus.announce(NodeChanged(7, "lifecycle"))

    assert heard == [NodeChanged(7, "lifecycle")]
    name = f"{__name__}.{broken.__qualname__}"
    assert bus.failures == {name: 1}
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING
    assert name in warning.getMessage()
    assert "Redis is away" in warning.getMessage()


def test_a_subscriber_hears_only_the_events_of_its_type(bus):
    nodes: list[NodeChanged] = []
    bus.subscribe(NodeChanged, nodes.append)
    bus.announce(FailureChanged(3, 1, "opened"))
    bus.announce(NodeChanged(1, "liveness"))
    assert nodes == [NodeChanged(1, "liveness")]
