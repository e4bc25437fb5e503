"""The agent's side of commands: each key run at most once, however often the server sends it.

A Command whose key the store has is answered from there: ``CommandStarted(repeat=True)`` while it
runs, its stored result (``repeat=True``) once it is over. A new key is written down, then run,
invasive commands one at a time (the server sends one at a time too; this holds even while a
cancelled one is still being killed), the others alongside. A Cancel stops the command's process
group and is answered with the result, which says what the check had measured; a Cancel for a key
the agent never had is answered (and kept) as refused, so a Command that comes after it never runs.

What the agent has to say goes to ``outbox``, which the transport sends first whenever it is
connected. Progress and log lines beyond ``MAX_PENDING_UPDATES`` waiting are dropped; results never
are, and they are in the store besides, for the server to ask again.
"""

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Final

import msgspec

from agents.commands.runner import Line, Runner
from agents.commands.store import CommandStore
from agents.protocol import Cancel, Command, CommandResult, CommandStarted, CommandUpdate, Message, encode

log = logging.getLogger(__name__)

MAX_PENDING_UPDATES: Final = 1000


class CommandExecutor:
    def __init__(
        self, store: CommandStore, runner: Runner, *, label: str = "agent", clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.runner = runner
        self.label = label
        self.clock = clock
        self._outbox: deque[tuple[bytes, bool]] = deque()  # (frame, whether it is a progress or log line)
        self.wake: asyncio.Event | None = None  # the transport's: set whenever the outbox grows
        self._closing = False
        self._stops: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._invasive = asyncio.Lock()
        self._updates = 0
        self.store.recover(self.clock())
        self.store.prune()

    # What the server sends --------------------------------------------------------------------

    def receive(self, message: Command | Cancel) -> None:
        if isinstance(message, Cancel):
            self._cancel(message)
            return
        if self._answered_from_store(message.key):
            return
        if self.clock() > message.deadline:
            self._refuse(message.key, message.invasive, "it came after its deadline; not started")
            return
        self.store.accept(message.key, invasive=message.invasive)
        stop = self._stops[message.key] = asyncio.Event()
        task = asyncio.get_running_loop().create_task(self._run(message, stop), name=f"command-{message.key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def refuse_unreadable(self, key: str, why: str) -> None:
        """A command the agent could not read (a server newer than the agent): refused, and kept so."""
        if not self._answered_from_store(key):
            self._refuse(key, True, f"this agent cannot read the command ({why}); upgrade the agent")

    def _cancel(self, cancel: Cancel) -> None:
        record = self.store.get(cancel.key)
        if record is None:
            self._refuse(cancel.key, True, "cancelled before the agent had it; never started")
        elif record.state == "finished":
            self._answered_from_store(cancel.key)
        elif (stop := self._stops.get(cancel.key)) is not None:
            log.info("%s: stopping command %s (%s)", self.label, cancel.key, cancel.reason or "cancelled")
            stop.set()

    def _answered_from_store(self, key: str) -> bool:
        record = self.store.get(key)
        if record is None:
            return False
        if record.result is not None:
            self._send(msgspec.structs.replace(record.result, repeat=True))
        elif record.state == "running" and record.started is not None:
            self._send(CommandStarted(key=key, started=record.started, repeat=True))
        return True  # one accepted and waiting for its turn says nothing until it starts

    def _refuse(self, key: str, invasive: bool, detail: str) -> None:
        self.store.accept(key, invasive=invasive)
        self._finish(CommandResult(key=key, outcome="refused", finished=self.clock(), detail=detail))

    # Running ------------------------------------------------------------------------------------

    async def _run(self, command: Command, stop: asyncio.Event) -> None:
        try:
            async with self._invasive if command.invasive else contextlib.nullcontext():
                if stop.is_set():
                    detail = "cancelled before it started"
                    result = CommandResult(key=command.key, outcome="cancelled", finished=self.clock(), detail=detail)
                else:
                    result = await self.runner.run(
                        command,
                        stop=stop,
                        started=lambda pid: self._started(command.key, pid),
                        relay=lambda line: self._relay(command.key, line),
                    )
        except Exception as error:  # a bug here must still end the command, and say so
            log.exception("%s: command %s failed in the agent", self.label, command.key)
            result = CommandResult(
                key=command.key, outcome="lost", finished=self.clock(), detail=f"the agent failed running it: {error!r}"
            )
        finally:
            self._stops.pop(command.key, None)
        self._finish(result)

    def _started(self, key: str, pid: int | None) -> None:
        record = self.store.started(key, pid)
        assert record.started is not None
        self._send(CommandStarted(key=key, started=record.started))

    def _relay(self, key: str, line: Line) -> None:
        if self._updates >= MAX_PENDING_UPDATES:
            return  # the socket is away or slow: progress is for now, not for later
        self._updates += 1
        self._send(CommandUpdate(key=key, line=line), update=True)

    def _finish(self, result: CommandResult) -> None:
        if self._closing and result.outcome == "cancelled":
            detail = "the agent was stopped while it ran; its process group was killed"
            result = msgspec.structs.replace(result, outcome="lost", detail=detail)
        self.store.finish(result.key, result)
        log.info("%s: command %s ended: %s %s", self.label, result.key, result.outcome, result.detail)
        self._send(result)

    def _send(self, message: Message, *, update: bool = False) -> None:
        self._outbox.append((encode(message), update))
        if self.wake is not None:
            self.wake.set()

    # What the transport takes -----------------------------------------------------------------

    def next_frame(self) -> bytes | None:
        """The next frame to send, left in place until ``sent()`` says it went."""
        return self._outbox[0][0] if self._outbox else None

    def sent(self) -> None:
        _, update = self._outbox.popleft()
        self._updates -= update

    async def close(self) -> None:
        """The agent is stopping: stop what runs (its process groups killed) and keep how it ended."""
        self._closing = True
        for stop in self._stops.values():
            stop.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
