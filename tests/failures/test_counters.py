"""Failures read from telemetry counters: what changed between two samples of a GPU."""

from datetime import UTC, datetime

import pytest

from agents.protocol import GpuSample
from apps.failures.choices import FailureKind, Severity
from apps.failures.counters import failures_from_sample_deltas
from apps.failures.events import record_event
from apps.failures.models import Failure
from tests.failures.conftest import T0, xid

pytestmark = pytest.mark.django_db


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=UTC)


HEALTHY = GpuSample(
    index=2,
    ecc_uncorrected_volatile=0,
    remapped_rows_pending=False,
    remapped_rows_failed=False,
    recovery_action=0,
)


def sample(**changes) -> GpuSample:
    return GpuSample(**{**{f: getattr(HEALTHY, f) for f in HEALTHY.__struct_fields__}, **changes})


def test_a_rise_in_uncorrected_volatile_ecc_raises_an_ecc_failure_on_the_gpu(node):
    [failure] = failures_from_sample_deltas(node.pk, HEALTHY, sample(ecc_uncorrected_volatile=2))
    assert (failure.kind, failure.code, failure.gpu_index) == (FailureKind.ECC, "ecc-uncorrected", 2)
    assert failure.severity == Severity.ERROR
    assert failure.detail == "Uncorrected volatile ECC count rose from 0 to 2."


def test_failed_row_remapping_raises_a_critical_failure_that_says_rma(node):
    [failure] = failures_from_sample_deltas(node.pk, HEALTHY, sample(remapped_rows_failed=True))
    assert (failure.kind, failure.severity) == (FailureKind.ROW_REMAP, Severity.CRITICAL)
    assert "RMA the GPU" in failure.recommended_action


def test_a_pending_row_remap_asks_for_a_reset_at_the_next_idle_window(node):
    [failure] = failures_from_sample_deltas(node.pk, HEALTHY, sample(remapped_rows_pending=True))
    assert failure.severity == Severity.WARNING
    assert "reset the GPU at the next idle window" in failure.recommended_action


@pytest.mark.parametrize(
    ("prev", "cur"),
    [
        (HEALTHY, HEALTHY),
        (None, sample(ecc_uncorrected_volatile=5, remapped_rows_failed=True)),  # nothing to compare with
        (sample(ecc_uncorrected_volatile=5), sample(ecc_uncorrected_volatile=0)),  # reset by a GPU reset
        (sample(ecc_uncorrected_volatile=None), sample(ecc_uncorrected_volatile=3)),  # not reported before
        (sample(remapped_rows_failed=None), sample(remapped_rows_failed=True)),
        (sample(remapped_rows_failed=True), sample(remapped_rows_failed=True)),  # already known
    ],
    ids=["unchanged", "no-previous", "counter-reset", "unsupported-before", "unknown-before", "still-failed"],
)
def test_it_raises_nothing_when_nothing_changed_for_the_worse(node, prev, cur):
    assert failures_from_sample_deltas(node.pk, prev, cur) == []
    assert not Failure.objects.exists()


def test_an_ecc_count_that_rises_after_xid_48_is_linked_to_it(node):
    cause = record_event(node.pk, xid(48, gpu=2))
    [failure] = failures_from_sample_deltas(node.pk, HEALTHY, sample(ecc_uncorrected_volatile=1), at=cause.last_seen)
    assert failure.cause == cause
    assert list(Failure.objects.alarms()) == [cause]


def test_repeated_rises_collapse_into_one_failure(node):
    failures_from_sample_deltas(node.pk, HEALTHY, sample(ecc_uncorrected_volatile=1))
    failures_from_sample_deltas(node.pk, sample(ecc_uncorrected_volatile=1), sample(ecc_uncorrected_volatile=4))
    assert Failure.objects.get().count == 2


def test_a_new_recovery_action_is_shown_on_the_gpus_active_failures(node):
    failure = record_event(node.pk, xid(79, gpu=2))
    failures_from_sample_deltas(node.pk, HEALTHY, sample(recovery_action=4))
    failure.refresh_from_db()
    assert failure.recovery_action == 4
    assert failure.recovery_action_text == "Drain the node, then reset the GPU."


def test_a_recovery_action_on_a_gpu_without_failures_raises_one_like_xid_154(node):
    [failure] = failures_from_sample_deltas(node.pk, HEALTHY, sample(recovery_action=2))
    assert (failure.xid, failure.recovery_action) == (154, 2)
    assert failure.severity == Severity.CRITICAL  # NVML says reboot the node: that outranks the XID's warning


def test_a_recovery_action_going_back_to_none_raises_nothing(node):
    assert failures_from_sample_deltas(node.pk, sample(recovery_action=1), HEALTHY) == []


def test_an_ecc_count_that_rose_before_its_xid_arrived_is_adopted_by_it(node):
    [early] = failures_from_sample_deltas(node.pk, HEALTHY, sample(ecc_uncorrected_volatile=1), at=at(0))
    cause = record_event(node.pk, xid(94, gpu=2, at=T0 + 1))
    early.refresh_from_db()
    assert early.cause == cause


def test_a_recovery_action_seen_before_its_xid_is_shown_on_the_xid(node):
    failures_from_sample_deltas(node.pk, HEALTHY, sample(recovery_action=4), at=at(0))
    cause = record_event(node.pk, xid(79, gpu=2, at=T0 + 1))
    cause.refresh_from_db()
    assert cause.recovery_action_text == "Drain the node, then reset the GPU."
    assert list(Failure.objects.alarms()) == [cause]
