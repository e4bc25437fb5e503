"""NVML's clock event reasons (called "throttle reasons" before driver 535) in words: why a GPU's
clocks are below their maximum right now, from the bitmask the agent reports.

Some reasons are business as usual (an idle GPU, a busy one held at its power cap); the slowdowns
are what an ops engineer looks for when a GPU runs slower than its siblings, so they are marked.
"""

from dataclasses import dataclass
from typing import Final

import pynvml


@dataclass(frozen=True)
class ClockEventReason:
    bit: int
    text: str
    slowdown: bool  # the GPU is being slowed by heat, power delivery or hardware: worth a look


CLOCK_EVENT_REASONS: Final = (
    ClockEventReason(pynvml.nvmlClocksEventReasonGpuIdle, "idle", False),
    ClockEventReason(pynvml.nvmlClocksEventReasonApplicationsClocksSetting, "application clocks setting", False),
    ClockEventReason(pynvml.nvmlClocksEventReasonSwPowerCap, "power cap", False),
    ClockEventReason(pynvml.nvmlClocksEventReasonHwSlowdown, "hardware slowdown", True),
    ClockEventReason(pynvml.nvmlClocksEventReasonSyncBoost, "sync boost", False),
    ClockEventReason(pynvml.nvmlClocksEventReasonSwThermalSlowdown, "thermal slowdown (software)", True),
    ClockEventReason(pynvml.nvmlClocksEventReasonHwThermalSlowdown, "thermal slowdown (hardware)", True),
    ClockEventReason(pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, "power brake (hardware)", True),
    ClockEventReason(pynvml.nvmlClocksEventReasonDisplayClockSetting, "display clock setting", False),
    ClockEventReason(pynvml.nvmlClocksThrottleReasonBoardLimit, "board limit", True),
    ClockEventReason(pynvml.nvmlClocksThrottleReasonReliability, "reliability limit", True),
)


def decode(mask: int | None) -> list[ClockEventReason]:
    """The reasons a bitmask holds, in NVML's bit order; bits this table does not know (a newer
    driver) are reported as one reason naming them, never dropped. None (not reported): none."""
    if not mask:
        return []
    reasons = [reason for reason in CLOCK_EVENT_REASONS if mask & reason.bit]
    unknown = mask & ~sum(reason.bit for reason in CLOCK_EVENT_REASONS)
    if unknown:
        reasons.append(ClockEventReason(unknown, f"unknown reason bits {unknown:#x}", True))
    return reasons
