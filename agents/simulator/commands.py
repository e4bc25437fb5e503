"""Commands on a simulated node: the same executor and store as a real agent's (each key once, one
invasive command at a time, cancels), with the check computed from the node's model
(``simulate_check``) instead of a process, so a thousand simulated nodes run a burn-in in one process.

A check takes ``time_scale`` of the time a real one would (its ``nominal_duration_s``), so a demo's
quick burn-in of minutes passes in seconds; it reports progress as it goes, ends with the log lines a
real check ends with (agents/executors/summary.py), and stops on a cancel.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Final

from agents.commands.runner import Line, ended
from agents.executors.summary import summary_lines
from agents.protocol import CheckProgress, CheckResult, Command, CommandResult
from agents.simulator.checks import simulate_check
from agents.simulator.collector import SimulatedCollector

DEFAULT_TIME_SCALE: Final = 0.02
STEPS: Final = 4  # progress lines a check reports


def exit_code(result: CheckResult) -> int:
    """What ``python -m agents.executors`` exits with for this result: 3 error, 1 failed, else 0."""
    return 3 if result.error else 1 if result.passed is False else 0


class SimulatedRunner:
    def __init__(
        self,
        collector: SimulatedCollector,
        *,
        time_scale: float = DEFAULT_TIME_SCALE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.collector = collector
        self.time_scale = time_scale
        self.clock = clock

    async def run(
        self,
        command: Command,
        *,
        stop: asyncio.Event,
        started: Callable[[int | None], None],
        relay: Callable[[Line], None],
    ) -> CommandResult:
        began = self.clock()
        started(None)
        result = simulate_check(self.collector, command.check, command.params, now=began)
        duration = min((result.finished - result.started) * self.time_scale, command.time_limit_s)
        for step in range(STEPS):
            relay(CheckProgress(check=command.check, fraction=step / STEPS, step=f"simulated {command.check}"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), duration / STEPS)
            if stop.is_set():
                return ended(command, "cancelled", began=began, clock=self.clock, detail="stopped on cancel")
        for line in summary_lines(result):
            relay(line)
        return ended(command, "exited", began=began, clock=self.clock, exit_code=exit_code(result), result=result)
