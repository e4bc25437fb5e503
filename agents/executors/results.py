"""Building a check's result: figures judged as they are measured, kept as the check goes, so a
check that is interrupted or breaks half-way still reports what it had."""

import time
from collections.abc import Callable
from typing import Any

from agents.collectors.hostfacts import short_text
from agents.protocol import (
    MAX_MEASUREMENTS_PER_RESULT,
    Bound,
    CheckDevice,
    CheckMeasurement,
    CheckName,
    CheckResult,
    MeasurementUnit,
    meets,
)

ERROR_MAX = 2000  # agents.protocol.LongText


def significant(value: float, digits: int = 6) -> float:
    """``value`` to ``digits`` significant digits, for evidence: a CPU's 0.004 TFLOP/s keeps its
    precision as an H100's 750 does."""
    return float(f"{value:.{digits}g}")


def measurement(
    name: str,
    measured: float,
    unit: MeasurementUnit,
    expected: float | None = None,
    bound: Bound = "at_least",
    *,
    gpu: int | None = None,
    peer: int | None = None,
    port: str | None = None,
    evidence: dict[str, Any] | None = None,
    passed: bool | None = None,
) -> CheckMeasurement:
    """A figure, judged against ``expected`` when there is one. ``passed`` without ``expected`` is a
    tool's own verdict (gpu-burn's FAULTY); with ``expected`` it is computed, never taken."""
    verdict = meets(measured, expected, bound) if expected is not None else passed
    return CheckMeasurement(
        name=name,
        measured=float(measured),
        unit=unit,
        expected=None if expected is None else float(expected),
        bound=bound,
        passed=verdict,
        gpu=gpu,
        peer=peer,
        port=port,
        evidence=evidence or {},
    )


class ResultBuilder:
    """The result of one check run, filled in as it goes."""

    def __init__(self, check: CheckName, clock: Callable[[], float] = time.time) -> None:
        self.check: CheckName = check
        self.clock = clock
        self.started = clock()
        self.device: CheckDevice = "cpu"
        self.device_name = "CPU"
        self.tool = "none"
        self.measurements: list[CheckMeasurement] = []
        self.evidence: dict[str, Any] = {}
        self.dropped = 0  # measurements past the protocol's limit, counted in the evidence

    def ran_on(self, device: CheckDevice, device_name: str, tool: str) -> None:
        self.device = device
        self.device_name = short_text(device_name) or device
        self.tool = short_text(tool) or "none"

    def add(self, *measurements: CheckMeasurement) -> None:
        room = MAX_MEASUREMENTS_PER_RESULT - len(self.measurements)
        self.measurements.extend(measurements[:room])
        self.dropped += max(0, len(measurements) - room)

    def finish(self, *, error: str | None = None, skipped: str | None = None) -> CheckResult:
        verdicts = [m.passed for m in self.measurements if m.passed is not None]
        if False in verdicts:
            passed: bool | None = False
        elif verdicts and error is None and skipped is None:
            passed = True
        else:
            passed = None
        evidence = dict(self.evidence)
        if self.dropped:
            evidence["measurements_left_out"] = self.dropped
        return CheckResult(
            check=self.check,
            device=self.device,
            device_name=self.device_name,
            tool=self.tool,
            started=self.started,
            finished=max(self.started, self.clock()),
            passed=passed,
            measurements=list(self.measurements),
            error=_bounded(error),
            skipped=_bounded(skipped),
            evidence=evidence,
        )


def _bounded(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= ERROR_MAX else text[: ERROR_MAX - 1] + "…"
