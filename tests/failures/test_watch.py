"""The telemetry watch's conditions that last, besides throttling: rows still pending or failed
remapping, a recovery action still asked for. Raised at once when the counter changes, sighted again
every minute while they last, so a failure resolved while the GPU still shows it is followed by a new one."""

from datetime import UTC, datetime

import pytest

from agents.protocol import GpuSample
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
