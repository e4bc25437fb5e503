"""Thermal and power-brake evidence in one GPU sample, from what a real GPU reports: NVML's clocks-event
reasons (``throttle_reasons``) and its temperature against the slowdown threshold it reported in the
inventory (``nvmlDeviceGetTemperatureThreshold(SLOWDOWN)``, ``Gpu.slowdown_temp_c``).

- **Thermal**: SW thermal slowdown (0x20), HW thermal slowdown (0x40), or the temperature at or above
  the slowdown threshold (which also covers a GPU whose driver cannot report the reasons).
- **Power brake**: HW power brake slowdown (0x80), or HW slowdown (0x8) with no sign of heat. The
  driver sets 0x8 for heat, for the board's power brake and for its fast power-draw protection; with
  the heat ruled out, it is the power delivery.

A sample shows evidence; a failure needs it to last (``THROTTLE_HOLD``, one minute), which the
telemetry watch (apps/failures/watch.py) judges for every GPU sample the ingest stores, the simulated
fleet's and real agents' alike.
"""

from datetime import timedelta
from typing import Final

import pynvml

from agents.protocol import GpuSample
from apps.failures import conditions
from apps.failures.conditions import Condition
from apps.telemetry import throttle

SW_THERMAL: Final = pynvml.nvmlClocksEventReasonSwThermalSlowdown  # 0x20
HW_THERMAL: Final = pynvml.nvmlClocksEventReasonHwThermalSlowdown  # 0x40
HW_SLOWDOWN: Final = pynvml.nvmlClocksEventReasonHwSlowdown  # 0x8
POWER_BRAKE: Final = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown  # 0x80
THERMAL_REASONS: Final = SW_THERMAL | HW_THERMAL
SLOWDOWN_REASONS: Final = THERMAL_REASONS | HW_SLOWDOWN | POWER_BRAKE

# How long the evidence must last before it is a failure: one throttled sample (a burst at a job's
# start, a reading at the threshold) is not an alarm; a minute of it is lost throughput worth a look.
THROTTLE_HOLD: Final = timedelta(seconds=60)


def throttling(sample: GpuSample, slowdown_c: float | None) -> tuple[Condition, ...]:
    """The conditions one sample shows evidence of (usually none: this runs for every sample)."""
    reasons = sample.throttle_reasons or 0
    hot = slowdown_c is not None and sample.temp_c is not None and sample.temp_c >= slowdown_c
    if not (reasons & SLOWDOWN_REASONS or hot):
        return ()
    thermal = hot or bool(reasons & THERMAL_REASONS)
    braking = bool(reasons & POWER_BRAKE) or (bool(reasons & HW_SLOWDOWN) and not thermal)
    return (conditions.THERMAL,) * thermal + (conditions.POWER_BRAKE,) * braking


def describe(sample: GpuSample, slowdown_c: float | None, held: timedelta) -> str:
    """The sighting's own words: what the GPU reported, and for how long."""
    parts = []
    if sample.temp_c is not None:
        threshold = f" (slows down at {slowdown_c:.0f} °C)" if slowdown_c is not None else ""
        parts.append(f"{sample.temp_c:.0f} °C{threshold}")
    reasons = [reason.text for reason in throttle.decode(sample.throttle_reasons) if reason.slowdown]
    if reasons:
        parts.append(f"clock event reasons: {', '.join(reasons)}")
    if sample.sm_clock_mhz is not None:
        parts.append(f"SM clock {sample.sm_clock_mhz} MHz")
    return f"{'; '.join(parts)}; for {held.total_seconds():.0f} s."
