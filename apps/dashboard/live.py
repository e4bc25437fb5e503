"""Live telemetry for browsers: each node's newest values, sent to the live streams' groups.

The ingest announces every committed batch (``TelemetryStored``, apps/core/events.py) and the
publisher, subscribed to it (apps/dashboard/apps.py), notes each node's newest sample. The notes are
sent at once: one ``telemetry.node`` message to each changed node's group ``node.<id>``, and one
``telemetry.fleet`` message to the ``fleet`` group summarising every changed node (built as they are
sent, apps/dashboard/messages.py; a node's GPU-by-GPU message only while someone watches it). One
round of sends is under way at a time; what batches commit meanwhile is noted (newest sample per
node wins) and goes in the next round. So a group gets at most one message per committed batch (the
ingestor flushes every 250 ms), never one per sample (DESIGN.md: a channels_redis ``group_send``
costs ~1 ms), and a sample is not held back here: pacing each browser to one message a second is the
consumer's job (apps/dashboard/consumers.py), the one place that knows when that browser last heard
from the server.

Browser consumers subscribed to these groups implement ``telemetry_node`` and ``telemetry_fleet``
(apps/dashboard/consumers.py). A node's group is sent only while some browser watches that node
(apps/dashboard/watchers.py: a send to an empty group still costs two Redis round trips), and at
most ``MAX_CONCURRENT_SENDS`` sends are in flight at once (the Redis client's pool holds 100
connections and refuses more: gathering 1,000 sends at once failed most of them).
"""

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from channels.layers import BaseChannelLayer

from agents.protocol import NodeSample
from apps.core.events import TelemetryStored
from apps.core.process import ProcessPart
from apps.dashboard import watchers
from apps.dashboard.loops import LoopThread
from apps.dashboard.messages import FLEET_GROUP, fleet_entry, node_group, node_update

log = logging.getLogger(__name__)

WATCHED_REFRESH_S = 1.0  # the watch registry is read at most this often
MAX_CONCURRENT_SENDS = 32


@dataclass
class _Sender:
    """The publisher's own loop and channel layer, and the round of sends under way on it."""

    own: LoopThread
    round: asyncio.Task[None] | None = None

    async def round_done(self) -> None:
        if self.round is not None:
            await self.round


class LivePublisher(ProcessPart):
    """Sends what ``telemetry_stored`` notes as soon as the previous round of sends is done, from an
    event loop of its own (started with the first batch, or by the server's lifespan). Stored telemetry
    is announced on the ingest's writer thread (apps/core/events.py), and a loop of its own needs no
    one to say which loop the server runs, or whether it runs one."""

    def __init__(
        self,
        *,
        watched_refresh_s: float = WATCHED_REFRESH_S,
        watched_nodes: Callable[[BaseChannelLayer], Awaitable[set[int] | None]] = watchers.watched_nodes,
    ) -> None:
        self.watched_refresh_s = watched_refresh_s
        self._watched_nodes = watched_nodes  # None: unknown, send every node's group
        self._watched: set[int] | None = None
        self._watched_read_at = float("-inf")
        self._lock = threading.Lock()  # what is noted, and the sender: noted on one thread, sent on another
        self._nodes: dict[int, NodeSample] = {}  # node id -> its newest sample not yet sent
        self._sender: _Sender | None = None
        self._failing = False
        self.failed_sends = 0

    def telemetry_stored(self, event: TelemetryStored) -> None:
        """The subscriber, on the thread that committed: note each node's newest sample and make sure a
        round of sends is under way on the publisher's loop. Cheap: the ingest's ack waits for it."""
        with self._lock:
            for node_id, message in event.messages:
                newest = max(message.samples, key=lambda sample: sample.ts)
                current = self._nodes.get(node_id)
                if current is None or current.ts <= newest.ts:
                    self._nodes[node_id] = newest
            sender = self._started()
        sender.own.loop.call_soon_threadsafe(self._start_round, sender)

    def start(self) -> None:
        with self._lock:
            self._started()

    async def shutdown(self) -> None:
        """Send what is noted, then stop the loop and its thread (and with the loop, its Redis connections)."""
        with self._lock:
            sender, self._sender = self._sender, None
        if sender is None:
            return
        await asyncio.wrap_future(sender.own.submit(sender.round_done()))
        await sender.own.stop()
        self._watched, self._watched_read_at = None, float("-inf")

    def _started(self) -> _Sender:
        """The sender, started if it is not (called holding the lock)."""
        if self._sender is None:
            self._sender = _Sender(LoopThread.start("live-publisher"))
        return self._sender

    def _start_round(self, sender: _Sender) -> None:
        if sender.round is None or sender.round.done():
            sender.round = sender.own.loop.create_task(self._run(sender.own.layer), name="live-publisher-round")

    async def _run(self, layer: BaseChannelLayer) -> None:
        loop = asyncio.get_running_loop()
        while self._nodes:
            try:
                await self._publish(layer, loop.time())
            except Exception as exc:  # what was taken is lost; the next batch brings newer values
                log.warning("Live telemetry: a round of sends failed: %s", exc, exc_info=True)

    async def _publish(self, layer: BaseChannelLayer, now: float) -> None:
        """Send everything noted so far: each watched node's group, and the fleet."""
        with self._lock:
            nodes, self._nodes = self._nodes, {}
        if not nodes:
            return
        watched = await self._watched_now(layer, now)
        messages = [(node_group(n), node_update(n, s)) for n, s in nodes.items() if watched is None or n in watched]
        fleet = {"type": "telemetry.fleet", "nodes": [fleet_entry(n, s.ts, s.gpus) for n, s in nodes.items()]}
        messages.append((FLEET_GROUP, fleet))
        await self._send(layer, messages)

    async def _watched_now(self, layer: BaseChannelLayer, now: float) -> set[int] | None:
        """The watched nodes, read at most once per ``watched_refresh_s``."""
        if now - self._watched_read_at >= self.watched_refresh_s:
            self._watched, self._watched_read_at = await self._watched_nodes(layer), now
        return self._watched

    async def _send(self, layer: BaseChannelLayer, messages: list[tuple[str, dict[str, Any]]]) -> None:
        in_flight = asyncio.Semaphore(MAX_CONCURRENT_SENDS)

        async def send(group: str, message: dict[str, Any]) -> None:
            async with in_flight:
                await layer.group_send(group, message)

        results = await asyncio.gather(*(send(g, m) for g, m in messages), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        self.failed_sends += len(failures)
        if failures and not self._failing:  # logged once per outage, not once per round; counted always
            log.warning("Live telemetry: %d of %d group sends failed: %s", len(failures), len(messages), failures[0])
        self._failing = bool(failures)
