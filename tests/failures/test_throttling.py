"""Thermal and power-brake failures from what a GPU reports: its clocks-event reasons and its temperature
against the slowdown threshold its agent reported, held for a minute so one throttled sample is not an
alarm, judged by the telemetry watch for the simulated fleet's samples and the real NVML collector's."""

from datetime import UTC, datetime

import pytest

from agents.collectors.nvml import NvmlCollector
from agents.protocol import GpuSample
from apps.failures import conditions
from apps.failures.choices import FailureKind, FailureState, Severity
from apps.failures.models import Failure
from apps.failures.throttling import THROTTLE_HOLD, throttling
from apps.failures.watch import GAP, RESIGHT, TelemetryWatch
from apps.inventory.models import Gpu
from tests.agents.fakes import FakeGpu, FakeNvml
from tests.failures.conftest import T0

pytestmark = pytest.mark.django_db

THERMAL, POWER_BRAKE = conditions.THERMAL, conditions.POWER_BRAKE
SW_THERMAL, HW_THERMAL, HW_SLOWDOWN, BRAKE, POWER_CAP = 0x20, 0x40, 0x8, 0x80, 0x4


def gpu(reasons: int = POWER_CAP, temp: float = 70.0, index: int = 6) -> GpuSample:
    return GpuSample(index=index, util_gpu=98.0, temp_c=temp, sm_clock_mhz=1755, throttle_reasons=reasons)


HOT = gpu(SW_THERMAL, 88.0)
COOL = gpu()


# What one sample shows --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "slowdown_c", "shown"),
    [
        (gpu(SW_THERMAL), 85.0, (THERMAL,)),
        (gpu(HW_THERMAL | HW_SLOWDOWN), 85.0, (THERMAL,)),  # 0x8 with heat behind it is the heat
        (gpu(POWER_CAP, temp=86.0), 85.0, (THERMAL,)),  # over the GPU's own threshold, whatever the bits say
        (gpu(POWER_CAP, temp=86.0), 87.0, ()),  # a GPU that slows down later
        (gpu(POWER_CAP, temp=86.0), None, ()),  # threshold unknown: the bits alone decide
        (gpu(BRAKE | HW_SLOWDOWN), 85.0, (POWER_BRAKE,)),
        (gpu(HW_SLOWDOWN), 85.0, (POWER_BRAKE,)),  # hardware slowdown with no heat: the power delivery
        (gpu(SW_THERMAL | BRAKE), 85.0, (THERMAL, POWER_BRAKE)),
        (gpu(POWER_CAP), 85.0, ()),  # held at its power cap: business as usual
        (gpu(0x1, temp=40.0), 85.0, ()),  # idle
        (GpuSample(index=0), 85.0, ()),  # nothing reported
    ],
    ids=[
        "sw-thermal",
        "hw-thermal",
        "over-threshold",
        "under-its-threshold",
        "no-threshold",
        "power-brake",
        "hw-slowdown-cool",
        "both",
        "power-cap",
        "idle",
        "empty",
    ],
)
def test_a_sample_shows_thermal_or_power_brake_evidence(sample, slowdown_c, shown):
    assert throttling(sample, slowdown_c) == shown


# Held for a minute, then sighted every minute -----------------------------------------------------


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, tz=UTC)


def feed(watch: TelemetryWatch, node, seconds: range, sample: GpuSample | None = None, *, start: float = 0.0):
    """One sample a second; the failures they raised or repeated."""
    raised = []
    for second in seconds:
        raised += watch.observe(node.pk, [(at(start + second), [sample or HOT])])
    return raised


def test_one_throttled_sample_is_not_an_alarm_a_minute_of_it_is(node):
    watch = TelemetryWatch()
    assert feed(watch, node, range(int(THROTTLE_HOLD.total_seconds()))) == []  # 0 .. 59 s
    assert not Failure.objects.exists()

    [failure] = feed(watch, node, range(60, 61))

    assert (failure.kind, failure.code, failure.severity, failure.gpu_index) == (
        FailureKind.THERMAL,
        "thermal",
        Severity.WARNING,
        6,
    )
    assert failure.first_seen == at(60)
    assert failure.detail == "88 °C; clock event reasons: thermal slowdown (software); SM clock 1755 MHz; for 60 s."
    assert "airflow" in failure.recommended_action


def test_a_cool_sample_in_between_does_not_restart_the_hold_but_a_cool_spell_does(node):
    watch = TelemetryWatch()
    feed(watch, node, range(30))
    feed(watch, node, range(30, 31), COOL)  # a bit that flickered at the threshold
    assert len(feed(watch, node, range(31, 61))) == 1

    other = TelemetryWatch()
    feed(other, node, range(30), gpu(SW_THERMAL, 88.0, index=2))
    gap = int(GAP.total_seconds()) + 2
    feed(other, node, range(30, 30 + gap), gpu(index=2))
    assert feed(other, node, range(30 + gap, 60 + gap), gpu(SW_THERMAL, 88.0, index=2)) == []  # held afresh


def test_while_it_lasts_it_is_sighted_again_every_minute_not_every_sample(node):
    watch = TelemetryWatch()
    feed(watch, node, range(61 + 150))  # opened at 60 s, sighted again at 120 s and 180 s
    failure = Failure.objects.get()
    assert (failure.count, failure.first_seen, failure.last_seen) == (3, at(60), at(180))
    assert failure.detail.endswith("for 180 s.")


def test_a_thermal_failure_resolved_while_the_gpu_is_still_hot_opens_a_new_one_at_the_next_sighting(node):
    watch = TelemetryWatch()
    [first] = feed(watch, node, range(61))
    first.resolve(actor="alice", note="fans replaced")

    raised = feed(watch, node, range(61, 61 + int(RESIGHT.total_seconds())))

    [second] = raised
    assert second.pk != first.pk
    assert (second.state, second.code, second.first_seen) == (FailureState.OPEN, "thermal", at(120))
    first.refresh_from_db()
    assert first.state == FailureState.RESOLVED


def test_a_gpu_over_its_reported_slowdown_threshold_opens_one_without_any_reason_bit(node):
    Gpu.objects.filter(node=node, index=6).update(slowdown_temp_c=85.0)
    watch = TelemetryWatch()
    [failure] = feed(watch, node, range(61), gpu(POWER_CAP, temp=86.0))
    assert failure.code == "thermal"
    assert failure.detail.startswith("86 °C (slows down at 85 °C);")


def test_a_power_brake_held_for_a_minute_opens_an_error_of_kind_power(node):
    watch = TelemetryWatch()
    [failure] = feed(watch, node, range(61), gpu(BRAKE | HW_SLOWDOWN, 60.0))
    assert (failure.kind, failure.code, failure.severity) == (FailureKind.POWER, "power-brake", Severity.ERROR)
    assert "power brake (hardware)" in failure.detail
    assert "PSUs" in failure.recommended_action


def test_the_real_nvml_collectors_samples_go_through_the_same_judgement(node):
    fake = FakeNvml([FakeGpu(index, remapped=(4, 1, 0, 0)) for index in range(8)])  # no rows pending
    fake.gpus[6].clock_reasons, fake.gpus[6].temperature = SW_THERMAL | HW_SLOWDOWN, 89
    watch = TelemetryWatch()
    raised = []
    with fake.patched():
        collector = NvmlCollector(hostname=node.hostname)
        assert collector.discover().gpus[6].slowdown_temp_c == 87
        for second in range(62):
            sample = collector.sample(T0 + second)
            raised += watch.observe(node.pk, [(at(second), sample.gpus)])

    assert [(f.code, f.gpu_index) for f in raised] == [("thermal", 6)]
    assert raised[0].detail.startswith("89 °C;")
