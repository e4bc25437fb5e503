"""Many coroutines' calls of one kind, run together: one database trip (and one commit) for all of them.

When two thousand agents connect at once, each one's authentication and Welcome done on its own is
a few small queries and a commit, a few milliseconds each on a quiet machine and tens on a loaded
one; on the one thread every consumer's database work of a process queues on, the last agents of
the queue waited past their handshake timeout, gave up and came back, and the work done for them
was lost. ``Batched`` runs what arrived while the previous batch ran as the next batch, in one call
of a function that takes the whole list: an idle server answers the first caller at once (a batch
of one), a busy one answers thousands with a few round trips.

A batch that fails is tried again one item at a time, so one bad item fails its own caller only. A
caller that stops waiting (its client went away) costs nothing more than its place in the batch.

Items that must not wait behind the others (``ahead``) go into batches of their own, before any other
item waiting: a fleet's acknowledgements of one command came with five times as many progress lines,
log lines and results, and the last acknowledgement was stored behind eight batches of them, 4.6 s
after the server had it; and a batch of them alone is a few cheap statements, where one with results
is many (benchmarks/dispatch.py).
"""

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from channels.db import database_sync_to_async

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

BatchFunction = Callable[[Sequence[T]], Sequence[R]]
Runner = Callable[[BatchFunction[T, R]], Callable[[Sequence[T]], Awaitable[Sequence[R]]]]


Waiting = tuple[T, asyncio.Future[R]]  # an item and its caller's future


@dataclass
class _Queue(Generic[T, R]):
    waiting: list[Waiting[T, R]] = field(default_factory=list)
    draining: asyncio.Task[None] | None = None


class Batched(Generic[T, R]):
    """``await batched(item)``: the result for ``item`` of ``function(items)``, which takes a list and
    returns one result per item, in order. ``run`` turns ``function`` into a coroutine function
    (``database_sync_to_async`` by default, or a ``DatabaseThread``'s ``run``); at most ``max_batch``
    items go into one call. Items for which ``ahead`` is true go, in the order they came, into batches
    of their own, before any other waiting item; give it only when running them before items that came
    earlier changes nothing those items do."""

    def __init__(
        self,
        function: BatchFunction[T, R],
        *,
        run: Runner[T, R] | None = None,
        max_batch: int = 500,
        ahead: Callable[[T], bool] | None = None,
    ) -> None:
        self.function = function
        self.run = run or database_sync_to_async
        self.max_batch = max_batch
        self.ahead = ahead
        self.batches = 0  # calls of ``function`` so far, for tests and benchmarks
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue[T, R]] = weakref.WeakKeyDictionary()

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        queue = self._queues.setdefault(loop, _Queue())
        future: asyncio.Future[R] = loop.create_future()
        queue.waiting.append((item, future))
        if queue.draining is None or queue.draining.done():
            queue.draining = loop.create_task(self._drain(queue))
        return await future

    async def _drain(self, queue: _Queue[T, R]) -> None:
        while queue.waiting:
            batch, queue.waiting = self._next_batch(queue.waiting)
            live = [(item, future) for item, future in batch if not future.done()]
            if not live:
                continue
            try:
                results = await self._call([item for item, _ in live])
            except Exception as exc:
                if len(live) == 1:
                    _settle(live[0][1], exception=exc)
                    continue
                log.warning("A batch of %d failed (%s); trying each on its own", len(live), exc)
                for item, future in live:
                    try:
                        _settle(future, result=(await self._call([item]))[0])
                    except Exception as single:
                        _settle(future, exception=single)
                continue
            for (_, future), result in zip(live, results, strict=True):
                _settle(future, result=result)

    def _next_batch(self, waiting: list[Waiting[T, R]]) -> tuple[list[Waiting[T, R]], list[Waiting[T, R]]]:
        """The next batch, and what waits after it."""
        if self.ahead is not None:
            first: list[Waiting[T, R]] = []
            rest: list[Waiting[T, R]] = []
            for each in waiting:
                (first if self.ahead(each[0]) else rest).append(each)
            if first:
                return first[: self.max_batch], first[self.max_batch :] + rest
        return waiting[: self.max_batch], waiting[self.max_batch :]

    async def _call(self, items: list[T]) -> Sequence[R]:
        self.batches += 1
        results = await self.run(self.function)(items)
        if len(results) != len(items):
            raise RuntimeError(f"{self.function.__name__} gave {len(results)} results for {len(items)} items")
        return results


def _settle(future: asyncio.Future[R], *, result: R | None = None, exception: Exception | None = None) -> None:
    if future.done():  # its caller stopped waiting
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)  # type: ignore[arg-type]
