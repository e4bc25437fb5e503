"""Live telemetry for browsers: the newest values, published through the channel layer.

The ingestor calls ``on_batch_stored`` after every commit (cheap: it only notes each node's newest
sample). The notes are sent at once: one ``telemetry.node`` message to each changed node's group
``node.<id>``, and one ``telemetry.fleet`` message to the ``fleet`` group summarising every changed
node (built as they are sent; a node's GPU-by-GPU message only while someone watches it). One round
of sends is under way at a time; what batches commit meanwhile is noted (newest sample per node
wins) and goes in the next round. So a group gets at most one message per committed batch (the
ingestor flushes every 250 ms), never one per sample (DESIGN.md: a channels_redis ``group_send``
costs ~1 ms), and a sample is not held back here: pacing each browser to one message a second is
the consumer's job (apps/dashboard/consumers.py), the one place that knows when that browser last
heard from the server.

Browser consumers subscribed to these groups implement ``telemetry_node`` and ``telemetry_fleet``
(apps/dashboard/consumers.py). A node's group is sent only while some browser watches that node
(apps/dashboard/watchers.py: a send to an empty group still costs two Redis round trips), and at
most ``MAX_CONCURRENT_SENDS`` sends are in flight at once (the Redis client's pool holds 100
connections and refuses more: gathering 1,000 sends at once failed most of them).
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from statistics import fmean
from typing import Any, Protocol

from channels.layers import get_channel_layer

from agents.protocol import NodeSample
from apps.dashboard import watchers
from apps.telemetry.storage import StoredBatch

log = logging.getLogger(__name__)

WATCHED_REFRESH_S = 1.0  # the watch registry is read at most this often
LIVE_GPU_FIELDS = ("util_gpu", "util_mem", "mem_used_mib", "temp_c", "power_w", "sm_clock_mhz")
FLEET_GROUP = "fleet"
MAX_CONCURRENT_SENDS = 32


def node_group(node_id: int) -> str:
    return f"node.{node_id}"


def node_update(node_id: int, sample: NodeSample) -> dict[str, Any]:
    """The ``telemetry.node`` message: one node's newest sample, GPU by GPU."""
    gpus = [{"index": gpu.index, **{name: getattr(gpu, name) for name in LIVE_GPU_FIELDS}} for gpu in sample.gpus]
    return {"type": "telemetry.node", "node": node_id, "ts": sample.ts, "gpus": gpus}


HEAT_FIELDS = ("util", "power", "temp", "mem")  # a heatmap cell's values, in this order


class GpuReading(Protocol):
    """What a fleet entry reads of a GPU: a sample as the agent sent it, or a stored row's values."""

    @property
    def index(self) -> int: ...
    @property
    def util_gpu(self) -> float | None: ...
    @property
    def power_w(self) -> float | None: ...
    @property
    def temp_c(self) -> float | None: ...
    @property
    def mem_used_mib(self) -> int | None: ...


def heat_cell(gpu: GpuReading) -> list[int | None]:
    """One GPU's heatmap cell, ``HEAT_FIELDS`` in order: utilization %, power W, temperature °C and
    memory used GiB, in whole numbers, since a colour cannot show a tenth of a percent and every value
    that does not move is one the delta leaves out. (Written out: it runs for every GPU of every
    sample published and of every fleet snapshot, 8,000 times at 1,000 nodes.)"""
    util, power, temp, mem = gpu.util_gpu, gpu.power_w, gpu.temp_c, gpu.mem_used_mib
    return [
        None if util is None else round(util),
        None if power is None else round(power),
        None if temp is None else round(temp),
        None if mem is None else round(mem / 1024),
    ]


def heat_cells(gpus: Sequence[GpuReading]) -> list[list[int | None] | None]:
    """A node's cells by GPU index (null for an index that did not report): one short list, which a
    delta replaces whole. At 1,000 nodes that is ~130 bytes a node instead of ~360 as objects."""
    cells: list[list[int | None] | None] = [None] * (max((g.index for g in gpus), default=-1) + 1)
    for gpu in gpus:
        cells[gpu.index] = heat_cell(gpu)
    return cells


def fleet_entry(node_id: int, ts: float, gpus: Sequence[GpuReading]) -> dict[str, Any]:
    """One node's line in the ``telemetry.fleet`` message (its sample at ``ts``): its summary and its
    GPUs' heatmap cells. The fleet snapshot (apps/dashboard/streams.py) builds its entries with it too."""
    utils = [g.util_gpu for g in gpus if g.util_gpu is not None]
    powers = [g.power_w for g in gpus if g.power_w is not None]
    temps = [g.temp_c for g in gpus if g.temp_c is not None]
    return {
        "node": node_id,
        "ts": ts,
        "gpus": len(gpus),
        "util_gpu_mean": fmean(utils) if utils else None,
        "power_w_total": sum(powers) if powers else None,
        "temp_c_max": max(temps) if temps else None,
        "heat": heat_cells(gpus),
    }


class LivePublisher:
    """Sends what ``note`` collects as soon as the previous round of sends is done."""

    def __init__(
        self,
        *,
        watched_refresh_s: float = WATCHED_REFRESH_S,
        watched_nodes: Callable[[], Awaitable[set[int] | None]] = watchers.watched_nodes,
    ) -> None:
        self.watched_refresh_s = watched_refresh_s
        self._watched_nodes = watched_nodes  # None: unknown, send every node's group
        self._watched: set[int] | None = None
        self._watched_read_at = float("-inf")
        self._nodes: dict[int, NodeSample] = {}  # node id -> its newest sample not yet sent
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def note(self, stored: StoredBatch) -> None:
        """Remember each node's newest sample of the batch and make sure a round of sends is under way."""
        for submission in stored.stored:
            newest = max(submission.message.samples, key=lambda sample: sample.ts)
            current = self._nodes.get(submission.node_id)
            if current is None or current.ts <= newest.ts:
                self._nodes[submission.node_id] = newest
        loop = asyncio.get_running_loop()
        if self._nodes and (self._task is None or self._task.done() or self._task.get_loop() is not loop):
            self._task = loop.create_task(self._run(), name="telemetry-live-publisher")

    async def publish(self, now: float) -> None:
        """Send everything noted so far: each watched node's group, and the fleet."""
        watched = await self._watched_now(now)
        nodes, self._nodes = self._nodes, {}
        if not nodes:
            return
        messages = [(node_group(n), node_update(n, s)) for n, s in nodes.items() if watched is None or n in watched]
        fleet = {"type": "telemetry.fleet", "nodes": [fleet_entry(n, s.ts, s.gpus) for n, s in nodes.items()]}
        messages.append((FLEET_GROUP, fleet))
        await self._send(messages)

    async def _watched_now(self, now: float) -> set[int] | None:
        """The watched nodes, read at most once per ``watched_refresh_s``."""
        if now - self._watched_read_at >= self.watched_refresh_s:
            self._watched, self._watched_read_at = await self._watched_nodes(), now
        return self._watched

    async def _send(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        in_flight = asyncio.Semaphore(MAX_CONCURRENT_SENDS)

        async def send(group: str, message: dict[str, Any]) -> None:
            async with in_flight:
                await layer.group_send(group, message)

        results = await asyncio.gather(*(send(g, m) for g, m in messages), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures and not self._failing:  # once per outage, not once per round
            log.warning("Live telemetry: %d of %d group sends failed: %s", len(failures), len(messages), failures[0])
        self._failing = bool(failures)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._nodes:
            await self.publish(loop.time())


publisher = LivePublisher()


def on_batch_stored(stored: StoredBatch) -> None:
    """Called by the ingestor, on its event loop, after each committed batch."""
    publisher.note(stored)
