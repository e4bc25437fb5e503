"""A connection's messages on their way into storage beside its message loop: each handed to its store
at once, each answered once stored, in the order received.

uvicorn reads an agent's next frame only when the consumer asks for the next message. A consumer
that awaited each telemetry frame's batch (the ingestor's next write, 250 ms away) or each command
report's store (behind a fleet's Hellos and acknowledgements on the database thread) asked for
nothing while it waited: the agent's pings went unanswered, its pongs unread, and uvicorn closed the
socket at its 20 s keepalive timeout. A thousand agents reconnected round and round, their Hellos
queued behind the stores, and the fleet never settled (331 of 1,000 acknowledged within 60 s). So the
consumer puts each message here and reads on. Its store starts at once, so it joins the batch being
gathered from every connection of the process (the ingestor's, apps/telemetry/ingest.py; the command
reports', apps/core/batching.py), and batches are stored in the order their items came; one task per
connection awaits the stores oldest first and answers each (telemetry's ack, a report's Error), so
the answers go out in the order the messages came.

A pipeline holds at most ``max_in_flight`` messages; past it, ``put`` waits and the socket is read at
the pace of storage. When the connection ends, ``drop`` stops waiting: a message whose batch was
already taken is stored or not with it, one still waiting for a batch is not, and neither is
answered. That loses nothing the agent cares about: it replays unacknowledged telemetry (the seq
check drops what was stored), and the server asks again about a command whose start or result did
not land (see consumers.py for each).
"""

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

M = TypeVar("M")
R = TypeVar("R")

Store = Callable[[M], Awaitable[R]]
Answer = Callable[[M, R | Exception], Awaitable[None]]


class StorePipeline(Generic[M, R]):
    """``await pipeline.put(message)`` starts ``store(message)`` and returns (unless ``max_in_flight``
    are pending); ``answer(message, outcome)`` is awaited for each, in the order put, with what the
    store returned or the exception it raised."""

    def __init__(self, name: str, store: Store[M, R], answer: Answer[M, R], *, max_in_flight: int) -> None:
        self.name = name
        self.store = store
        self.answer = answer
        self._room = asyncio.Semaphore(max_in_flight)
        self._pending: deque[tuple[M, asyncio.Future[R]]] = deque()
        self._arrived = asyncio.Event()
        self._answering: asyncio.Task[None] | None = None

    async def put(self, message: M) -> None:
        await self._room.acquire()
        self._pending.append((message, asyncio.ensure_future(self.store(message))))
        self._arrived.set()
        if self._answering is None:
            self._answering = asyncio.create_task(self._answer_in_order(), name=self.name)

    async def drop(self) -> None:
        """The connection ended: stop waiting for the stores, answer nothing more (the module says why
        that loses nothing)."""
        stores = [store for _, store in self._pending]
        self._pending.clear()
        if self._answering is not None:
            stores.append(self._answering)
        for store in stores:
            store.cancel()
        await asyncio.gather(*stores, return_exceptions=True)

    async def _answer_in_order(self) -> None:
        while True:
            while not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
            message, store = self._pending[0]
            try:
                outcome: R | Exception = await store
            except Exception as exc:  # the store's failure is the message's answer, not the pipeline's end
                outcome = exc
            self._pending.popleft()
            self._room.release()
            try:
                await self.answer(message, outcome)
            except Exception:  # an answer that fails must not stop the answers after it
                logger.exception("%s: failed to answer %s", self.name, type(message).__name__)
