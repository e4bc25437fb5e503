"""Every command key the agent has taken, kept so that none runs twice, not even across a restart.

A key is written down (fsynced, ``accepted``) before its process starts, again with the process's
pid and start time once it runs, and a last time with its result. A key found again answers from
here. On start-up, a key the agent took but never finished (it was killed, the node rebooted) is
finished as ``lost``: its process group is killed if it is still alive (its output is gone with the
agent that read it), and it is never started again.

Records are one small JSON file a key under ``<state dir>/commands/``; finished ones are forgotten
after ``RETENTION_S`` (the control plane stops asking about a command long before), and at most
``MAX_RECORDS`` are kept. The simulated fleet keeps them in memory (``directory=None``).
"""

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, Literal

import msgspec

from agents.durable import fsync_dir, write_private_file
from agents.executors.tools.process import start_time
from agents.protocol import CommandKey, CommandResult, Timestamp

log = logging.getLogger(__name__)

RETENTION_S: Final = 14 * 24 * 3600
MAX_RECORDS: Final = 10_000

RecordState = Literal["accepted", "running", "finished"]


class Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    key: CommandKey
    state: RecordState
    accepted: Timestamp
    invasive: bool = True
    started: Timestamp | None = None
    pid: int | None = None  # the process, leader of its own process group
    pid_started: int | None = None  # its start time in clock ticks (/proc/PID/stat), so a reused pid is not mistaken
    result: CommandResult | None = None


_decoder = msgspec.json.Decoder(Record)


class CommandStore:
    def __init__(self, directory: Path | None, *, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.clock = clock
        self._records: dict[str, Record] = {}
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._records = dict(self._load(directory))

    def get(self, key: str) -> Record | None:
        return self._records.get(key)

    def accept(self, key: str, *, invasive: bool) -> Record:
        """Write the key down before anything runs for it."""
        return self._put(Record(key=key, state="accepted", accepted=self.clock(), invasive=invasive))

    def started(self, key: str, pid: int | None) -> Record:
        record = self._records[key]
        record.state, record.started, record.pid = "running", self.clock(), pid
        record.pid_started = start_time(pid) if pid is not None else None
        return self._put(record)

    def finish(self, key: str, result: CommandResult) -> Record:
        record = self._records[key]
        record.state, record.result = "finished", result
        return self._put(record)

    def unfinished(self) -> list[Record]:
        return [record for record in self._records.values() if record.state != "finished"]

    def recover(self, finished_at: float) -> list[Record]:
        """After a restart: finish every key taken and not finished as lost, killing what is left of its
        process group. Returns those records."""
        lost = []
        for record in self.unfinished():
            killed = record.pid is not None and kill_group_if_alive(record.pid, record.pid_started)
            detail = (
                "the agent restarted while it ran; its process group was killed"
                if killed
                else "the agent restarted while it ran"
                if record.state == "running"
                else "the agent restarted before it started it"
            )
            result = CommandResult(
                key=record.key, outcome="lost", started=record.started, finished=finished_at, detail=detail
            )
            log.warning("command %s: %s; it is not run again", record.key, detail)
            lost.append(self.finish(record.key, result))
        return lost

    def prune(self) -> int:
        """Forget finished keys older than RETENTION_S, and the oldest past MAX_RECORDS."""
        finished = sorted((r for r in self._records.values() if r.state == "finished"), key=lambda r: r.accepted)
        cutoff = self.clock() - RETENTION_S
        excess = max(0, len(self._records) - MAX_RECORDS)
        forget = [r for index, r in enumerate(finished) if r.accepted < cutoff or index < excess]
        for record in forget:
            del self._records[record.key]
            if self.directory is not None:
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / f"{record.key}.json").unlink()
        if forget and self.directory is not None:
            fsync_dir(self.directory)
        return len(forget)

    def _put(self, record: Record) -> Record:
        self._records[record.key] = record
        if self.directory is not None:
            write_private_file(self.directory / f"{record.key}.json", msgspec.json.encode(record))
        return record

    @staticmethod
    def _load(directory: Path) -> Iterator[tuple[str, Record]]:
        for path in sorted(directory.glob("*.json")):
            try:
                record = _decoder.decode(path.read_bytes())
            except (OSError, msgspec.DecodeError) as error:
                # Never silently: a key whose record cannot be read could run twice, so say which.
                log.error("cannot read the command record %s (%s); that key is treated as new", path, error)
                continue
            yield record.key, record


def kill_group_if_alive(pid: int, started: int | None) -> bool:
    """SIGKILL the process group ``pid`` leads, if that process is still the one that was started then."""
    if started is None or start_time(pid) != started:
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True
