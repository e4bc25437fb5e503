"""A child process of a check (a tool, torchrun): in the check's own process group, so that the
command runner's kill of the group reaches it; with a deadline; its output streamed to a callback
piece by piece (a progress line that ends in ``\\r`` arrives as it is written) and kept bounded.

When the deadline passes, or the check itself is interrupted, the child gets ``stop_signal``, then
after a grace period SIGKILL, and so does every process it started that is still alive (gpu-burn's
per-GPU workers, torchrun's ranks): nothing it started outlives the check.
"""

import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

MAX_CAPTURE_BYTES: Final = 16 * 1024 * 1024  # a dcgmi diag -r 4 JSON document is well under 1 MB
STDERR_TAIL_LINES: Final = 60
GRACE_S: Final = 10.0
PROC: Final = Path("/proc")


@dataclass(frozen=True)
class ToolRun:
    returncode: int
    stdout: str  # at most MAX_CAPTURE_BYTES, the start kept
    stderr_tail: str
    timed_out: bool
    seconds: float


def run_tool(
    argv: Sequence[str],
    *,
    timeout_s: float,
    on_output: Callable[[str], None] = lambda piece: None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    stop_signal: signal.Signals = signal.SIGTERM,
) -> ToolRun:
    """Run ``argv`` to its end or its deadline. Raises FileNotFoundError when it cannot start."""
    began = time.monotonic()
    child = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env) if env is not None else None,
    )
    tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
    errors = threading.Thread(target=_drain_lines, args=(child.stderr, tail), daemon=True)
    errors.start()
    captured: list[bytes] = []
    size = 0
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        stop(child, stop_signal)

    deadline = threading.Timer(timeout_s, expire)
    deadline.daemon = True
    deadline.start()
    try:
        assert child.stdout is not None
        while piece := child.stdout.read1(65536):
            if size < MAX_CAPTURE_BYTES:
                captured.append(piece[: MAX_CAPTURE_BYTES - size])
                size += len(captured[-1])
            on_output(piece.decode("utf-8", errors="replace"))
        child.wait()
    finally:
        deadline.cancel()
        if child.poll() is None:  # interrupted (or on_output raised): the child goes too
            stop(child, stop_signal)
        errors.join(timeout=GRACE_S)
    return ToolRun(
        returncode=child.returncode,
        stdout=b"".join(captured).decode("utf-8", errors="replace"),
        stderr_tail="\n".join(tail),
        timed_out=expired.is_set(),
        seconds=time.monotonic() - began,
    )


def stop(child: subprocess.Popen, first: signal.Signals = signal.SIGTERM, grace_s: float = GRACE_S) -> None:
    """Ask ``child`` to stop, wait ``grace_s``, then SIGKILL it and whatever it started (each process
    checked by its start time first, so a pid the system has given to someone else is left alone)."""
    family = descendants(child.pid)
    if child.poll() is None:
        child.send_signal(first)
        with suppress(subprocess.TimeoutExpired):
            child.wait(timeout=grace_s)
    if child.poll() is None:
        child.kill()
    for pid, started in [*family, *descendants(child.pid)]:
        if start_time(pid) == started:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    child.wait()


def descendants(pid: int, proc: Path = PROC) -> list[tuple[int, int]]:
    """Every living process below ``pid`` as (pid, start time), from /proc, parents first."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in proc.iterdir() if proc.is_dir() else ():
        stat = _stat(entry) if entry.name.isdigit() else None
        if stat is not None:
            children.setdefault(int(stat[1]), []).append((int(entry.name), int(stat[19])))
    found, queue = [], list(children.get(pid, []))
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(children.get(current[0], []))
    return found


def start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot), or None when it is gone: with its pid, it names
    the process, where a pid alone may have been given to another since."""
    stat = _stat(PROC / str(pid))
    return None if stat is None else int(stat[19])


def _stat(entry: Path) -> list[str] | None:
    """/proc/PID/stat's fields after the name (state first), or None when the process is gone."""
    try:
        text = (entry / "stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()  # the name, in parentheses, may hold spaces


def _drain_lines(stream: IO[bytes], into: deque[str]) -> None:
    for raw in stream:
        into.append(raw.decode("utf-8", errors="replace").rstrip())
