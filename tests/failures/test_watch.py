"""The telemetry watch's conditions that last, besides throttling: rows still pending or failed
remapping, a recovery action still asked for. Raised at once when the counter changes, sighted again
every minute while they last, so a failure resolved while the GPU still shows it is followed by a new one."""

from datetime import UTC, datetime

import pytest

from agents.protocol import GpuEvent, GpuSample, PortSample
from apps.failures.choices import FailureState
from apps.failures.events import record_event
from apps.failures.models import Failure
from apps.failures.watch import RESIGHT, TelemetryWatch
from tests.failures.conftest import T0, xid

pytestmark = pytest.mark.django_db

MINUTE = int(RESIGHT.total_seconds())


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=UTC)


def rows(pending: bool = False, failed: bool = False, action: int = 0) -> GpuSample:
    return GpuSample(
        index=2,
        ecc_uncorrected_volatile=0,
        remapped_rows_pending=pending,
        remapped_rows_failed=failed,
        recovery_action=action,
    )


def feed(watch: TelemetryWatch, node, seconds: range, sample: GpuSample) -> list[Failure]:
    raised = []
    for second in seconds:
        raised += watch.observe(node.pk, [(at(second), [sample])])
    return raised


def test_rows_still_pending_after_their_failure_was_resolved_open_a_new_one_a_minute_on(node):
    watch = TelemetryWatch()
    feed(watch, node, range(1), rows())
    [first] = feed(watch, node, range(1, 2), rows(pending=True))  # the counter changed: raised at once
    first.resolve(actor="alice", note="reset the GPU")  # it was not

    raised = feed(watch, node, range(2, 2 + MINUTE), rows(pending=True))

    [second] = raised
    assert second.pk != first.pk
    assert (second.code, second.state, second.first_seen) == ("row-remap-pending", FailureState.OPEN, at(1 + MINUTE))
    assert second.detail == "A row is still pending remapping (for 60 s)."


def test_while_rows_stay_failed_the_open_failure_is_counted_again_every_minute(node):
    watch = TelemetryWatch()
    feed(watch, node, range(1), rows())
    feed(watch, node, range(1, 2 + 2 * MINUTE), rows(failed=True))
    failure = Failure.objects.get()
    assert (failure.code, failure.count, failure.last_seen) == ("row-remap-failed", 3, at(1 + 2 * MINUTE))


def test_rows_already_pending_when_the_watch_starts_are_sighted_once_they_have_lasted_a_minute(node):
    watch = TelemetryWatch()  # a server restart: nothing to compare the first sample with
    assert feed(watch, node, range(MINUTE), rows(pending=True)) == []
    [failure] = feed(watch, node, range(MINUTE, MINUTE + 1), rows(pending=True))
    assert failure.code == "row-remap-pending"


def test_rows_pending_as_a_side_effect_stay_with_their_xid_while_they_last(node):
    cause = record_event(node.pk, xid(63, gpu=2, at=T0 + 1))
    watch = TelemetryWatch()
    feed(watch, node, range(1), rows())
    feed(watch, node, range(1, 2 + 3 * MINUTE), rows(pending=True))  # long after the XID's sighting

    [effect] = Failure.objects.exclude(pk=cause.pk)
    assert (effect.code, effect.cause_id, effect.count) == ("row-remap-pending", cause.pk, 4)
    assert list(Failure.objects.alarms()) == [cause]


def test_a_recovery_action_still_asked_for_after_its_failure_was_resolved_raises_a_new_one(node):
    watch = TelemetryWatch()
    feed(watch, node, range(1), rows())
    [first] = feed(watch, node, range(1, 2), rows(action=1))
    assert first.xid == 154
    first.resolve(actor="alice")

    [second] = feed(watch, node, range(2, 2 + MINUTE), rows(action=1))

    assert (second.xid, second.recovery_action, second.state) == (154, 1, FailureState.OPEN)
    assert second.pk != first.pk


def test_a_condition_that_ended_is_held_afresh_when_it_comes_back(node):
    watch = TelemetryWatch()
    feed(watch, node, range(1), rows())
    feed(watch, node, range(1, 2), rows(failed=True))  # raised at the change
    feed(watch, node, range(2, 30), rows())  # rows fine again (the driver reloaded)
    feed(watch, node, range(30, 30 + MINUTE), rows(failed=True))  # changed again: counted at once, at 30 s
    assert Failure.objects.get().count == 2
    feed(watch, node, range(30 + MINUTE, 31 + MINUTE), rows(failed=True))  # a minute since it came back
    assert Failure.objects.get().count == 3


# Ports ---------------------------------------------------------------------------------------------


def port(state: str = "active") -> PortSample:
    return PortSample(device="mlx5_3", port=1, state=state, rate_gbps=400.0)


def feed_ports(watch: TelemetryWatch, node, seconds: range, states) -> list[Failure]:
    raised = []
    for second in seconds:
        raised += watch.observe(node.pk, [], [(at(second), [port(states(second))])])
    return raised


def test_a_port_still_down_after_its_failure_was_resolved_opens_a_new_one(node):
    watch = TelemetryWatch()
    feed_ports(watch, node, range(5), lambda s: "active")
    down = GpuEvent(
        ts=T0 + 5, kind="port", port_device="mlx5_3", port=1, port_state="down", previous_port_state="active"
    )
    first = record_event(node.pk, down)  # the agent's event: the link went down
    assert feed_ports(watch, node, range(5, 5 + MINUTE), lambda s: "down") == []  # not yet a minute
    [again] = feed_ports(watch, node, range(5 + MINUTE, 6 + MINUTE), lambda s: "down")
    assert (again.pk, again.count) == (first.pk, 2)  # a minute down: counted into the event's failure
    first.resolve(actor="alice", note="reseated the cable")

    [second] = feed_ports(watch, node, range(6 + MINUTE, 6 + 2 * MINUTE), lambda s: "down")

    assert second.pk != first.pk
    assert (second.code, second.port_name, second.state) == ("port-down", "mlx5_3/1", FailureState.OPEN)
    assert second.detail == "mlx5_3/1 is still down, or keeps going down (for 120 s)."


def test_a_flapping_port_lasts_as_one_condition(node):
    watch = TelemetryWatch()
    feed_ports(watch, node, range(1), lambda s: "active")
    raised = feed_ports(watch, node, range(1, 2 + MINUTE), lambda s: "down" if s % 12 < 3 else "active")
    assert [(f.code, f.port_name) for f in raised] == [("port-down", "mlx5_3/1")]


def test_a_port_never_seen_up_is_no_failure(node):
    watch = TelemetryWatch()  # an HCA port that is not cabled: down from the first sample on
    assert feed_ports(watch, node, range(3 * MINUTE), lambda s: "down") == []
    assert not Failure.objects.exists()
