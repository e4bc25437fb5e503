"""One command as a process of its own: ``python -m agents.executors CHECK --params JSON``.

It starts in a new session, so it leads its own process group and a kill of that group reaches every
process it started (a tool, torchrun; torchrun's ranks, in sessions of their own, die with torchrun
through ``PR_SET_PDEATHSIG``). It runs with the agent's environment plus the command's (``NCCL_*``
and the like, which the protocol limits) and ``CP_COMMAND_KEY``, for at most ``time_limit_s``. Its
stdout carries protocol lines, each validated before it is relayed; its stderr is kept, the last
``MAX_OUTPUT_CHARS`` of it. When the time limit passes or a Cancel comes, the group gets SIGTERM (a
check then reports what it had measured), and SIGKILL after ``grace_s``; whatever is left of the
group is killed once its leader has exited. Nothing it started outlives it.
"""

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import msgspec

from agents.protocol import (
    MAX_CHECK_LINE_BYTES,
    MAX_OUTPUT_CHARS,
    CheckLog,
    CheckProgress,
    CheckResult,
    Command,
    CommandOutcome,
    CommandResult,
    ProtocolError,
    decode_check_line,
)

log = logging.getLogger(__name__)

DEFAULT_PROGRAM: Final = (sys.executable, "-m", "agents.executors")
GRACE_S: Final = 10.0
KEY_VARIABLE: Final = "CP_COMMAND_KEY"

Line = CheckProgress | CheckLog


class Runner(Protocol):
    """How a command runs: a process (here), or a simulated node's model (agents/simulator/commands.py)."""

    async def run(
        self,
        command: Command,
        *,
        stop: asyncio.Event,
        started: Callable[[int | None], None],
        relay: Callable[[Line], None],
    ) -> CommandResult:
        """Run ``command`` until it ends, ``stop`` is set or its time limit passes. ``started`` is called
        once it runs (with its pid), ``relay`` with each progress and log line."""
        ...


def ended(
    command: Command, outcome: CommandOutcome, *, began: float, clock: Callable[[], float], **fields: Any
) -> CommandResult:
    """The result of a command that ran from ``began`` until now, as every runner reports it: never
    finished before it started, even if the clock stepped back meanwhile."""
    return CommandResult(key=command.key, outcome=outcome, started=began, finished=max(clock(), began), **fields)


class SubprocessRunner:
    def __init__(
        self,
        program: Sequence[str] = DEFAULT_PROGRAM,
        *,
        grace_s: float = GRACE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.program = tuple(program)
        self.grace_s = grace_s
        self.clock = clock

    async def run(
        self,
        command: Command,
        *,
        stop: asyncio.Event,
        started: Callable[[int | None], None],
        relay: Callable[[Line], None],
    ) -> CommandResult:
        argv = [*self.program, command.check, "--params", msgspec.json.encode(command.params).decode()]
        environment = {**os.environ, **command.env, KEY_VARIABLE: command.key}
        began = self.clock()
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=environment,
                start_new_session=True,
                limit=MAX_CHECK_LINE_BYTES + 1,
            )
        except OSError as error:
            return CommandResult(
                key=command.key, outcome="refused", finished=self.clock(), detail=f"could not start {argv[0]}: {error}"
            )
        started(process.pid)
        lines = _Lines(command.key, relay)
        output = _Tail()
        assert process.stdout is not None
        assert process.stderr is not None
        readers = asyncio.gather(lines.read(process.stdout), output.read(process.stderr))
        outcome, detail = await self._wait(process, stop, command.time_limit_s)
        _kill_group(process.pid, signal.SIGKILL)  # what the leader left behind, if anything
        try:
            await asyncio.wait_for(asyncio.shield(readers), self.grace_s)
        except TimeoutError:  # a process that left the group holds the pipes: stop reading them
            readers.cancel()
        return ended(
            command,
            outcome,
            began=began,
            clock=self.clock,
            exit_code=process.returncode if outcome == "exited" else None,
            result=lines.result,
            output=output.text(),
            output_truncated=output.truncated,
            detail=detail + lines.refused_note(),
        )

    async def _wait(self, process: asyncio.subprocess.Process, stop: asyncio.Event, limit: float) -> tuple[str, str]:
        exited = asyncio.ensure_future(process.wait())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            done, _ = await asyncio.wait({exited, stopped}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if exited in done:
            return "exited", ""
        outcome, detail = (
            ("cancelled", "stopped on cancel") if stopped in done else ("timed_out", f"time limit of {limit:g} s")
        )
        await self._terminate(process, exited)
        return outcome, f"{detail}; {_how_it_ended(process.returncode)}"

    async def _terminate(self, process: asyncio.subprocess.Process, exited: asyncio.Future[int]) -> None:
        _kill_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(exited), self.grace_s)
        except TimeoutError:
            _kill_group(process.pid, signal.SIGKILL)
            await exited


def _kill_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _how_it_ended(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"the process group was sent SIGTERM; it ended on {signal.Signals(-returncode).name}"
    return f"the process group was sent SIGTERM; it exited {returncode}"


class _Lines:
    """The check's stdout: progress and log lines relayed, the result kept, anything else refused
    (counted, the last refusal kept for the result's detail)."""

    def __init__(self, key: str, relay: Callable[[Line], None]) -> None:
        self.key = key
        self.relay = relay
        self.result: CheckResult | None = None
        self.refused = 0
        self.last_refusal = ""

    async def read(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # longer than any line the protocol allows: skip to its end
                self._refuse(f"a line over {MAX_CHECK_LINE_BYTES} bytes")
                with contextlib.suppress(ValueError):
                    await stream.readuntil(b"\n")
                continue
            if not raw:
                return
            if raw.strip():
                self._take(raw.rstrip(b"\n"))

    def _take(self, raw: bytes) -> None:
        try:
            line = decode_check_line(raw)
        except ProtocolError as error:
            self._refuse(f"{error.code}: {error.message}")
            return
        if isinstance(line, CheckResult):
            self.result = line
        else:
            self.relay(line)

    def _refuse(self, why: str) -> None:
        self.refused += 1
        self.last_refusal = why[:300]
        log.warning("command %s: a line its check wrote was refused (%s)", self.key, why)

    def refused_note(self) -> str:
        return f" ({self.refused} line(s) of its output refused; the last: {self.last_refusal})" if self.refused else ""


class _Tail:
    """The end of a stream, bounded: what the process wrote last is what explains how it ended."""

    def __init__(self, limit: int = MAX_OUTPUT_CHARS) -> None:
        self.limit = limit
        self._kept = bytearray()
        self.truncated = False

    async def read(self, stream: asyncio.StreamReader) -> None:
        while piece := await stream.read(65536):
            self._kept += piece
            if len(self._kept) > 4 * self.limit:  # characters may take up to four bytes
                del self._kept[: len(self._kept) - 4 * self.limit]
                self.truncated = True

    def text(self) -> str:
        text = self._kept.decode("utf-8", errors="replace")
        if len(text) > self.limit:
            self.truncated = True
            return text[-self.limit :]
        return text
