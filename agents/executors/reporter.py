"""A check's stdout: JSON lines of the wire protocol, each validated before it is written, so the
command runner never reads a line the server would refuse."""

import os
import sys
import time
from collections.abc import Callable
from typing import BinaryIO, Final

from agents.protocol import (
    CheckLog,
    CheckName,
    CheckProgress,
    CheckResult,
    LogLevel,
    Message,
    decode_check_line,
    encode,
)

PROGRESS_INTERVAL_S: Final = 0.5  # at most two progress lines a second; a new step is always sent
MESSAGE_MAX: Final = 500  # CheckProgress.message
LOG_MAX: Final = 2000  # CheckLog.message


def claim_stdout() -> BinaryIO:
    """This process's stdout, kept for protocol lines alone: file descriptor 1 is pointed at stderr,
    so whatever else prints (a library's banner, NCCL's log, which goes to stdout) cannot corrupt
    the stream the command runner parses."""
    sys.stdout.flush()
    protocol = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(protocol, "wb", buffering=0)


class Reporter:
    def __init__(
        self,
        check: CheckName,
        out: BinaryIO,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        self.check: CheckName = check
        self._out = out
        self._clock = clock
        self._interval_s = interval_s
        self._last_step: str | None = None
        self._last_at = -float("inf")

    def progress(self, fraction: float, step: str, message: str = "") -> None:
        now = self._clock()
        if step == self._last_step and fraction < 1 and now - self._last_at < self._interval_s:
            return
        self._last_step, self._last_at = step, now
        line = CheckProgress(
            check=self.check,
            fraction=min(1.0, max(0.0, fraction)),
            step=step[:128],
            message=message[:MESSAGE_MAX],
        )
        self._write(line)

    def log(self, level: LogLevel, message: str) -> None:
        self._write(CheckLog(check=self.check, level=level, message=message[:LOG_MAX]))

    def result(self, result: CheckResult) -> None:
        self._write(result)

    def _write(self, message: Message) -> None:
        line = encode(message)
        decode_check_line(line)  # what the runner and the server will do; a NaN fails here, not there
        self._out.write(line + b"\n")
        self._out.flush()
