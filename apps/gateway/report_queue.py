"""A connection's reports about its node's commands, stored beside its message loop, in order.

uvicorn reads an agent's next frame only when the consumer asks for the next message. A consumer
that awaited each report's store asked for nothing while it waited (behind a fleet's Hellos and
acknowledgements on the database thread): the agent's pings went unanswered, its pongs unread, and
uvicorn closed the socket at its 20 s keepalive timeout. A thousand agents acknowledging one command
came back, their Hellos queued behind the reports, and the fleet never settled (331 of 1,000
acknowledged within 60 s). So the consumer hands each report here and reads on; one task per
connection stores what has queued, oldest first, in the same batch as other connections' reports
(``sinks.store_command_report``, apps/core/batching.py), and answers a refused one with its Error.

What is still queued when the connection ends is dropped, as a queued inventory is: the server asks
again, and the agent answers from what it keeps on disk without running anything twice. A command
whose ``CommandStarted`` or result was dropped is still open on its row, so it is sent again after
the agent's next Hello (``frames_on_connect``) and, while unacknowledged, every
``JOBS_ACK_TIMEOUT_S``; the agent answers a key it has with ``CommandStarted(repeat)`` or the result
it stored. Progress and log lines are not asked for again: they are best effort on the agent too.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from agents import protocol
from apps.gateway import sinks

logger = logging.getLogger(__name__)

# Reports queued before the consumer waits for room: an agent answering a fleet's resends sends a
# few, one relaying a check's log lines a few a second, and the agent itself holds at most 1,000
# lines (agents/commands/executor.py). Past this, the socket is read at the pace reports are stored.
MAX_QUEUED: Final = 1000

Refused = Callable[[sinks.CommandReport, protocol.ProtocolError], Awaitable[None]]
Failed = Callable[[sinks.CommandReport], Awaitable[None]]


class ReportQueue:
    """``await queue.put(report)`` returns at once (unless ``MAX_QUEUED`` wait); the reports are
    stored in the order put. ``refused`` is awaited for each report the store refused, ``failed`` for
    each it failed to store (logged here)."""

    def __init__(self, node_id: int, *, refused: Refused, failed: Failed) -> None:
        self.node_id = node_id
        self.refused = refused
        self.failed = failed
        self._queue: asyncio.Queue[sinks.CommandReport] = asyncio.Queue(MAX_QUEUED)
        self._storing: asyncio.Task[None] | None = None

    async def put(self, report: sinks.CommandReport) -> None:
        await self._queue.put(report)
        if self._storing is None:
            self._storing = asyncio.create_task(self._store_as_they_come(), name=f"command-reports-{self.node_id}")

    async def drop(self) -> None:
        """Stop storing: the connection ended. What is queued is dropped (the module says why that loses
        nothing); a batch already in the store's hands is stored or not as a whole."""
        if self._storing is not None:
            self._storing.cancel()
            await asyncio.gather(self._storing, return_exceptions=True)

    async def _store_as_they_come(self) -> None:
        while True:
            reports = [await self._queue.get()]
            while not self._queue.empty():
                reports.append(self._queue.get_nowait())
            # Each report joins the batch being gathered from every connection; in the order put, so
            # they are stored in that order (a batch keeps its order, and batches run one after another).
            outcomes = await asyncio.gather(
                *(sinks.store_command_report((self.node_id, report)) for report in reports), return_exceptions=True
            )
            for report, outcome in zip(reports, outcomes, strict=True):
                await self._answer(report, outcome)

    async def _answer(
        self, report: sinks.CommandReport, outcome: protocol.ProtocolError | BaseException | None
    ) -> None:
        if isinstance(outcome, asyncio.CancelledError):
            raise outcome
        try:
            if isinstance(outcome, protocol.ProtocolError):
                await self.refused(report, outcome)
            elif isinstance(outcome, BaseException):
                logger.error("Failed to store %s from node %s", type(report).__name__, self.node_id, exc_info=outcome)
                await self.failed(report)
        except Exception:  # a reply that fails must not stop the storing of the next reports
            logger.exception("Failed to answer %s from node %s", type(report).__name__, self.node_id)
