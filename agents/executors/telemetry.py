"""The node's own telemetry during a check: the collector sampled on a thread of its own while the
work runs, reduced to what a burn-in judges (the hottest and most power-hungry moment of each GPU,
and every clock event reason that showed up).

NVML on a GPU node; nothing on the CPU (there is no collector, and the result has no such
figures). A simulated node does not come here: its figures come from its model."""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from agents.collectors.base import Collector
from agents.executors.results import measurement
from agents.protocol import CheckMeasurement, NodeSample

log = logging.getLogger(__name__)

# nvmlClocksEventReasons bits, by the names NVML's header gives them.
CLOCK_EVENT_REASONS: Final = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Under a full load the power cap is the GPU doing its job; these are a GPU or its cooling failing.
HARMFUL_REASONS: Final = 0x8 | 0x20 | 0x40 | 0x80


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if bits & bit]


@dataclass
class GpuWatch:
    samples: int = 0
    max_temp_c: float | None = None
    max_power_w: float | None = None
    min_sm_clock_mhz: int | None = None
    reasons: int = 0  # every bit seen
    throttled_samples: int = 0  # samples with a harmful reason


@dataclass
class TelemetryWatch:
    """Samples ``collector`` every ``interval_s`` between ``start`` and ``stop``, and closes it then."""

    collector: Collector | None
    interval_s: float = 1.0
    clock: Callable[[], float] = time.time
    gpus: dict[int, GpuWatch] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "TelemetryWatch":
        if self.collector is not None:
            self._take()
            self._thread = threading.Thread(target=self._loop, name="check-telemetry", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._take()
        if self.collector is not None:
            self.collector.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        assert self.collector is not None
        try:
            self.observe(self.collector.sample(self.clock()))
        except Exception as error:  # a sensor that hiccups must not end the stress under way
            log.warning("Telemetry sample failed during the check: %s", error)

    def observe(self, sample: NodeSample) -> None:
        for gpu in sample.gpus:
            watch = self.gpus.setdefault(gpu.index, GpuWatch())
            watch.samples += 1
            watch.max_temp_c = _higher(watch.max_temp_c, gpu.temp_c)
            watch.max_power_w = _higher(watch.max_power_w, gpu.power_w)
            if gpu.sm_clock_mhz is not None:
                clock = gpu.sm_clock_mhz
                watch.min_sm_clock_mhz = clock if watch.min_sm_clock_mhz is None else min(watch.min_sm_clock_mhz, clock)
            reasons = gpu.throttle_reasons or 0
            watch.reasons |= reasons
            watch.throttled_samples += bool(reasons & HARMFUL_REASONS)

    def measurements(
        self, gpus: tuple[int, ...], *, max_temp_c: float | None, fail_on_throttle: bool
    ) -> list[CheckMeasurement]:
        """Per GPU: its highest temperature and power, and the samples it spent throttled."""
        out = []
        for index in gpus:
            watch = self.gpus.get(index)
            if watch is None:
                continue
            seen = {"samples": watch.samples, "reasons_seen": reason_names(watch.reasons)}
            if watch.min_sm_clock_mhz is not None:
                seen["min_sm_clock_mhz"] = watch.min_sm_clock_mhz
            if watch.max_temp_c is not None:
                out.append(measurement("max_temp_c", watch.max_temp_c, "degC", max_temp_c, "at_most", gpu=index))
            if watch.max_power_w is not None:
                out.append(measurement("max_power_w", watch.max_power_w, "W", gpu=index))
            limit = 0 if fail_on_throttle else None
            out.append(
                measurement(
                    "throttled_samples", watch.throttled_samples, "count", limit, "at_most", gpu=index, evidence=seen
                )
            )
        return out


def _higher(current: float | None, value: float | None) -> float | None:
    if value is None:
        return current
    return value if current is None else max(current, value)
