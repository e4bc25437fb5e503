"""What a server process holds while it runs, and the one owner that starts it and lets it go.

A part is whatever an app keeps for the life of a server process: a worker thread with a database
connection of its own (``DatabaseThread``), the telemetry ingestor, the gateway's bookkeepers, the
live publisher, what the live streams remember having sent. Each app adds its parts to ``process``
in its ``AppConfig.ready()``, so that one look at the app configs says what a process holds.

- The ASGI lifespan (controlplane/lifespan.py) calls ``process.start(serves)`` when the server starts
  and ``process.shutdown()`` when it stops. ``serves`` says what the process answers (``Serves``): an
  agent gateway (controlplane/asgi.py ``agent_gateway``) starts only the parts agents need, so that
  it holds nothing for pages it never serves.
- The test suite shuts the parts down after every test, so that no test inherits what another left
  (node ids repeat from one test to the next), and before it drops the test databases.
- A part also starts on first use: a server run without a lifespan (``uvicorn --lifespan off``)
  works the same, and its parts go with the process. A part used again after a shutdown starts afresh.

Parts are shut down in the order they were added, which is INSTALLED_APPS order: the ingestor writes
what is pending while the subscribers it feeds (the telemetry watch, the live publisher) still listen.
"""

import asyncio
import enum
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar, ParamSpec, TypeVar

from channels.db import database_sync_to_async
from django.db import connections

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class Serves(enum.Flag):
    """What a server process answers."""

    AGENTS = enum.auto()  # node agents' sockets: what they report is stored and published from here
    PAGES = enum.auto()  # the dashboard's pages, the REST API, the browsers' sockets
    EVERYTHING = AGENTS | PAGES


class ProcessPart:
    """Something a server process holds while it runs. Override what applies."""

    # The processes that start it ahead of first use; any process still starts it on first use.
    needed_by: ClassVar[Serves] = Serves.EVERYTHING

    def start(self) -> None:
        """Get ready ahead of first use (called on the server's event loop as it starts)."""

    async def shutdown(self) -> None:
        """Finish what is under way, let go of threads and connections, forget what was remembered."""


PartT = TypeVar("PartT", bound=ProcessPart)


class DatabaseThread(ProcessPart):
    """One thread for one kind of database work, with a connection of its own: what runs here neither
    queues behind, nor holds up, the one thread Channels gives every consumer's other database calls
    in a process (``database_sync_to_async``'s default)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DatabaseThread({self.name!r})"

    @property
    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
            return self._executor

    def run(self, function: Callable[P, R]) -> Callable[P, Awaitable[R]]:
        """``function`` as a coroutine function that runs on this thread (closing stale connections
        around each call, as ``database_sync_to_async`` does)."""
        return database_sync_to_async(function, thread_sensitive=False, executor=self.executor)

    async def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:  # what was queued runs first, then the connection is closed
            await asyncio.wrap_future(executor.submit(connections.close_all))
            executor.shutdown(wait=False)


class Process:
    def __init__(self) -> None:
        self._parts: list[ProcessPart] = []

    def add(self, part: PartT) -> PartT:
        if part not in self._parts:
            self._parts.append(part)
        return part

    def start(self, serves: Serves = Serves.EVERYTHING) -> None:
        for part in self._parts:
            if part.needed_by & serves:
                part.start()

    async def shutdown(self) -> None:
        """Shut every part down, in the order added; one that fails does not keep the others up, and
        what failed is raised together at the end."""
        failures: list[Exception] = []
        for part in self._parts:
            try:
                await part.shutdown()
            except Exception as exc:
                log.warning("Shutting down %r failed: %s", part, exc, exc_info=True)
                failures.append(exc)
        if failures:
            raise ExceptionGroup("Some parts of the process did not shut down cleanly", failures)


process = Process()
