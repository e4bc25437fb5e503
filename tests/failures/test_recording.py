"""Agent events becoming failures: one failure per condition however often it repeats, and side
effects linked to their cause instead of raising alarms of their own."""

from datetime import UTC, datetime

import pytest

from agents.collectors import infiniband
from agents.protocol import GpuEvent, PortSample
from apps.accounts.models import AuditLogEntry
from apps.failures.choices import FailureKind, FailureState, Severity
from apps.failures.events import record_event, record_events
from apps.failures.models import Failure
from tests.failures.conftest import T0, events, xid

pytestmark = pytest.mark.django_db


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=UTC)


def test_it_opens_a_failure_with_the_catalogs_severity_and_action(node):
    failure = record_event(node.pk, xid(79, gpu=3, data="GPU has fallen off the bus."))
    assert failure.kind == FailureKind.XID
    assert (failure.xid, failure.gpu_index, failure.gpu.index) == (79, 3, 3)
    assert failure.severity == Severity.CRITICAL
    assert failure.title == "XID 79: GPU has fallen off the bus"
    assert "drain the node and reset the gpu" in failure.recommended_action.lower()
    assert failure.detail == "GPU has fallen off the bus."
    assert (failure.state, failure.count, failure.first_seen) == (FailureState.OPEN, 1, at(0))


def test_it_audits_the_opening_of_a_failure(node):
    failure = record_event(node.pk, xid(48))
    entry = AuditLogEntry.objects.get(action="failure.open")
    assert (entry.actor, entry.object_id, entry.detail["code"]) == ("system:agent", str(failure.pk), "xid-48")


def test_it_collapses_repeats_into_one_failure_with_a_count(node):
    record_events(node.pk, events(xid(74, at=T0), xid(74, at=T0 + 5), xid(74, at=T0 + 9, data="link 3 down")))
    failure = Failure.objects.get()
    assert failure.count == 3
    assert (failure.first_seen, failure.last_seen) == (at(0), at(9))
    assert failure.detail == "link 3 down"
    assert AuditLogEntry.objects.filter(action="failure.open").count() == 1  # repeats are counted, not logged


def test_a_replayed_older_sighting_widens_the_window_without_moving_last_seen_back(node):
    record_event(node.pk, xid(74, at=T0 + 10, data="newest"))
    record_event(node.pk, xid(74, at=T0, data="older"))
    failure = Failure.objects.get()
    assert (failure.first_seen, failure.last_seen, failure.detail) == (at(0), at(10), "newest")


def test_repeats_on_another_gpu_or_of_another_xid_are_other_failures(node):
    record_events(node.pk, events(xid(74, gpu=0), xid(74, gpu=1), xid(79, gpu=0)))
    assert Failure.objects.count() == 3


def test_a_repeat_after_the_failure_was_resolved_opens_a_new_one(node):
    first = record_event(node.pk, xid(48))
    first.resolve(actor="alice")
    second = record_event(node.pk, xid(48, at=T0 + 3600))
    assert second.pk != first.pk
    assert (second.count, second.state) == (1, FailureState.OPEN)


def test_a_repeat_collapses_into_an_acknowledged_failure(node):
    first = record_event(node.pk, xid(48))
    first.acknowledge(actor="alice")
    again = record_event(node.pk, xid(48, at=T0 + 60))
    assert again.pk == first.pk
    assert (again.count, again.state) == (2, FailureState.ACKNOWLEDGED)


# Side effects --------------------------------------------------------------------------------------


def test_xid_45_after_a_fatal_xid_on_the_same_gpu_is_linked_to_it_and_raises_no_alarm(node):
    record_events(node.pk, events(xid(79, gpu=2), xid(45, gpu=2, at=T0 + 2), xid(45, gpu=2, at=T0 + 3)))
    cause = Failure.objects.get(xid=79)
    side_effect = Failure.objects.get(xid=45)
    assert side_effect.cause == cause
    assert side_effect.is_side_effect
    assert side_effect.count == 2  # still counted
    assert list(Failure.objects.alarms()) == [cause]


def test_xid_45_alone_is_its_own_failure(node):
    failure = record_event(node.pk, xid(45))
    assert failure.cause is None
    assert list(Failure.objects.alarms()) == [failure]


def test_xid_45_on_another_gpu_is_not_linked(node):
    record_events(node.pk, events(xid(79, gpu=0), xid(45, gpu=1, at=T0 + 2)))
    assert Failure.objects.get(xid=45).cause is None


def test_xid_45_after_the_window_is_not_linked(node):
    record_events(node.pk, events(xid(79, gpu=0), xid(45, gpu=0, at=T0 + 61)))
    assert Failure.objects.get(xid=45).cause is None


def test_the_window_runs_from_the_causes_last_sighting(node):
    record_events(node.pk, events(xid(79), xid(79, at=T0 + 100), xid(45, at=T0 + 130)))
    assert Failure.objects.get(xid=45).cause.xid == 79


def test_xid_45_after_a_non_fatal_xid_is_not_linked(node):
    record_events(node.pk, events(xid(94), xid(45, at=T0 + 1)))
    assert Failure.objects.get(xid=45).cause is None


def test_a_fatal_xid_reported_after_its_side_effect_in_the_same_instant_is_still_recorded_first(node):
    record_events(node.pk, events(xid(45, at=T0), xid(79, at=T0)))
    assert Failure.objects.get(xid=45).cause.xid == 79


def test_a_side_effect_of_a_resolved_cause_is_not_linked_to_it(node):
    record_event(node.pk, xid(79)).resolve(actor="alice")
    assert record_event(node.pk, xid(45, at=T0 + 1)).cause is None


def test_resolving_the_cause_resolves_its_side_effects(node):
    record_events(node.pk, events(xid(48), xid(43, at=T0 + 1), xid(45, at=T0 + 1)))
    cause = Failure.objects.get(xid=48)
    assert cause.resolve(actor="alice", note="reset") == 2
    assert set(Failure.objects.values_list("state", flat=True)) == {FailureState.RESOLVED}
    assert Failure.objects.get(xid=45).resolution_note == f"Resolved with its cause, failure #{cause.pk}."


def test_a_failed_row_remap_after_a_double_bit_error_raises_its_own_alarm(node):
    record_events(node.pk, events(xid(48), xid(64, at=T0 + 1)))
    assert Failure.objects.get(xid=64).cause is None
    assert Failure.objects.alarms().count() == 2


# Other event kinds -----------------------------------------------------------------------------


def test_a_thermal_event_is_a_thermal_warning_on_its_gpu(node):
    failure = record_event(node.pk, GpuEvent(ts=T0, kind="thermal", gpu_index=5, data="HW slowdown"))
    assert (failure.kind, failure.severity, failure.gpu_index, failure.xid) == ("thermal", "warning", 5, None)


@pytest.mark.parametrize("written", ["mlx5_1", "mlx5_1/1", "mlx5_1:1"])
def test_a_port_event_lands_on_the_inventorys_port(node, written):
    failure = record_event(node.pk, GpuEvent(ts=T0, kind="port", port_device=written, data="state active → down"))
    assert (failure.kind, failure.port_name) == (FailureKind.INFINIBAND, "mlx5_1/1")
    assert failure.port == node.ports.get(device_name="mlx5_1")


def test_an_event_naming_a_gpu_the_inventory_does_not_have_yet_keeps_its_index(node):
    failure = record_event(node.pk, xid(48, gpu=12))
    assert (failure.gpu_index, failure.gpu) == (12, None)


def test_an_xid_event_without_its_number_is_kept_with_a_pointer_to_the_kernel_log(node):
    failure = record_event(node.pk, GpuEvent(ts=T0, kind="xid", gpu_index=0))
    assert failure.code == "xid-unknown"
    assert "dmesg" in failure.recommended_action


def test_an_unlisted_xid_gets_the_generic_entry(node):
    failure = record_event(node.pk, xid(999))
    assert failure.severity == Severity.WARNING
    assert "Look up XID 999" in failure.recommended_action


# Side effects that arrive before their cause ----------------------------------------------------
# XIDs come in the events stream, counters in the telemetry stream, each batched and replayed on its own.


def test_a_cause_arriving_after_its_side_effect_adopts_it(node):
    early = record_event(node.pk, xid(45, gpu=1, at=T0))
    cause = record_event(node.pk, xid(79, gpu=1, at=T0 + 2))
    early.refresh_from_db()
    assert early.cause == cause
    assert list(Failure.objects.alarms()) == [cause]
    entry = AuditLogEntry.objects.get(action="failure.link")
    assert (entry.object_id, entry.detail) == (str(early.pk), {"side_effect_of": cause.pk})


def test_a_cause_does_not_adopt_failures_from_long_before_or_on_other_gpus(node):
    record_event(node.pk, xid(45, gpu=1, at=T0))
    record_event(node.pk, xid(45, gpu=2, at=T0 + 200))
    record_event(node.pk, xid(79, gpu=1, at=T0 + 200))
    assert Failure.objects.filter(xid=45, cause__isnull=False).count() == 0


def test_an_adopted_side_effect_that_had_its_own_side_effects_goes_with_the_root_cause(node):
    record_events(node.pk, events(xid(95, at=T0), xid(45, at=T0 + 1)))
    root = record_event(node.pk, xid(48, at=T0 + 2))
    assert Failure.objects.get(xid=95).cause == root
    assert list(Failure.objects.alarms()) == [root]
    assert root.resolve(actor="alice") == 2
    assert not Failure.objects.active().exists()


def test_a_side_effect_shortly_before_its_causes_first_sighting_is_linked(node):
    record_event(node.pk, xid(79, gpu=0, at=T0 + 5))
    assert record_event(node.pk, xid(43, gpu=0, at=T0)).cause.xid == 79


# Port events ------------------------------------------------------------------------------------


def port_event(text: str, device: str = "mlx5_1") -> GpuEvent:
    return GpuEvent(ts=T0, kind="port", port_device=device, data=text)


def test_a_port_going_down_opens_a_failure_on_that_port(node):
    failure = record_event(node.pk, port_event("mlx5_1 port 1: state active → down"))
    assert (failure.kind, failure.port_name, failure.severity) == (FailureKind.INFINIBAND, "mlx5_1/1", Severity.ERROR)


def test_a_flap_between_two_samples_is_a_failure_even_though_the_port_is_up_again(node):
    assert record_event(node.pk, port_event("mlx5_1 port 1: link went down 1 time")) is not None
    assert record_event(node.pk, port_event("mlx5_1 port 1: state polling → active; link went down 2 times"))
    assert Failure.objects.get().count == 2


def test_a_port_coming_back_up_opens_nothing_and_leaves_the_failure_for_someone_to_look_at(node):
    down = record_event(node.pk, port_event("mlx5_1 port 1: state active → down"))
    assert record_event(node.pk, port_event("mlx5_1 port 1: state down → active")) is None
    down.refresh_from_db()
    assert (down.state, down.count) == (FailureState.OPEN, 1)


def test_the_port_number_comes_from_the_events_text_when_the_device_alone_is_named(node):
    failure = record_event(node.pk, port_event("mlx5_1 port 2: state active → down"))
    assert failure.port_name == "mlx5_1/2"
    assert failure.port is None  # the node type has one port per HCA


def test_it_reads_the_port_events_the_agent_writes(node):
    up = PortSample(device="mlx5_0", port=1, state="active", link_downed=0)
    down = PortSample(device="mlx5_0", port=1, state="down", link_downed=1)
    assert record_event(node.pk, infiniband.port_event(up, down, T0)).port_name == "mlx5_0/1"
    assert record_event(node.pk, infiniband.port_event(down, up, T0 + 5)) is None
