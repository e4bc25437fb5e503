"""The fleet as the live stream says it is now, held by the server process: what a fleet page embeds
for its first drawing, read from memory instead of computed again for every page view (the snapshot
costs ~30 ms of a quiet machine and several hundred of a loaded one at 1,000 nodes:
apps/dashboard/streams.py ``fleet_snapshot``).

The mirror is a member of the ``fleet`` group like any browser's consumer, on a loop and a channel
layer of its own (apps/dashboard/loops.py). Once it has joined it reads the snapshot (on the live
streams' snapshot thread), so that no change falls between the two, then merges every
``telemetry.fleet`` and ``node.state`` message the way a browser's page does. A node's telemetry
is merged when a page reads the mirror, its newest entry only: the fleet group brings each node's
entry with every batch the ingest commits (at 2,000 nodes and 2 samples a second, 4,000 entries a
second into every server process), and rounding and merging each one as it came was most of the
mirror's CPU, for pages that read it a few times a minute. Every ``resync_s`` it
renews its membership and reads the snapshot again: a message the channel layer dropped (a full
channel) would otherwise stay missed.

Pages take ``snapshot_json()``: the fleet as JSON text, ready to stand in a <script> element, encoded
at most once per ``encode_every_s`` while it changes (pages loaded within that time get the same
text). It is None until the first snapshot is in; the page then reads the snapshot itself. What a
page embeds is only its first drawing: the page's socket brings a snapshot read from the database
(apps/dashboard/consumers.py) and replaces it within a second.
"""

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec

from apps.core.process import DatabaseThread, ProcessPart, Serves
from apps.dashboard import streams
from apps.dashboard.deltas import Tree, merge
from apps.dashboard.loops import LoopThread
from apps.dashboard.messages import FLEET_GROUP

log = logging.getLogger(__name__)

RESYNC_S: Final = 60.0
ENCODE_EVERY_S: Final = 1.0
RETRY_S: Final = 5.0  # after the channel layer or the database failed


def script_json(tree: Tree) -> str:
    """``tree`` as JSON text that can stand inside a <script> element, as Django's json_script writes
    it (``<``, ``>`` and ``&`` escaped, so no text in it can close the element)."""
    text = msgspec.json.encode(tree).decode()
    return text.replace("<", "\\u003C").replace(">", "\\u003E").replace("&", "\\u0026")


class FleetMirror(ProcessPart):
    # Its loop merges every fleet message (1,000 nodes a second): for nothing where no page is served.
    needed_by = Serves.PAGES

    def __init__(
        self,
        snapshot_thread: DatabaseThread,
        *,
        resync_s: float = RESYNC_S,
        encode_every_s: float = ENCODE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._snapshot_thread = snapshot_thread
        self.resync_s = resync_s
        self.encode_every_s = encode_every_s
        self._clock = clock
        self._lock = threading.Lock()  # the entries: merged on the mirror's thread, read on the pages'
        self._entries: Tree | None = None
        self._telemetry: dict[int, dict[str, Any]] = {}  # node id -> its newest fleet entry not merged yet
        self._changed = False
        self._text: str | None = None
        self._encoded_at = float("-inf")
        self._own: LoopThread | None = None
        self._resync_now: asyncio.Event | None = None  # on the mirror's loop: read the snapshot again
        self.resyncs = 0  # snapshots read, the first included

    # What pages read ---------------------------------------------------------------------------

    def snapshot_json(self, counts: dict[str, dict[str, int]]) -> str | None:
        """The fleet's entries by node id as <script>-safe JSON text, if the mirror agrees with
        ``counts``, the database's nodes by lifecycle and by liveness (``Node.objects.state_counts``).
        None until the first snapshot is in, and when they disagree: nodes were added or removed
        (which sends the fleet no message) or a message was lost; the mirror then reads the snapshot
        again at once."""
        with self._lock:
            if self._entries is None:
                return None
            self._merge_telemetry(list(self._telemetry))
            if self._counts() != _nonzero(counts):
                if self._own is not None and self._resync_now is not None:
                    self._own.loop.call_soon_threadsafe(self._resync_now.set)
                return None
            if self._text is None or (self._changed and self._clock() - self._encoded_at >= self.encode_every_s):
                self._text = script_json(self._entries)
                self._encoded_at, self._changed = self._clock(), False
            return self._text

    def _counts(self) -> dict[str, dict[str, int]]:
        """The entries by lifecycle and by liveness (called holding the lock)."""
        counts: dict[str, dict[str, int]] = {"lifecycle": {}, "liveness": {}}
        for entry in self._entries.values():
            for field, by_state in counts.items():
                by_state[entry.get(field)] = by_state.get(entry.get(field), 0) + 1
        return counts

    # What the fleet group brings ---------------------------------------------------------------

    def replace(self, entries: Tree) -> None:
        """A snapshot read from the database, taken whole."""
        with self._lock:
            self._entries, self._changed = entries, True
            self._telemetry.clear()  # older than the snapshot, as what was merged before it
            self.resyncs += 1

    def apply(self, message: dict[str, Any]) -> None:
        """One message of the fleet group, merged as a browser merges its delta (before the first
        snapshot there is nothing to merge into: the snapshot, read after joining, has it). A node's
        telemetry waits for the next read (the module says why); its newest entry stands for those
        before it, since each replaces the same fields whole."""
        kind = message.get("type")
        if kind not in ("telemetry.fleet", "node.state"):
            return
        with self._lock:
            if self._entries is None:
                return
            if kind == "telemetry.fleet":
                self._telemetry.update((entry["node"], entry) for entry in message["nodes"])
            else:
                node = message["node"]
                self._merge_telemetry([node])  # the node's messages merged in the order they came
                merge(self._entries.setdefault(str(node), {}), message["state"])
            self._changed = True

    def _merge_telemetry(self, nodes: list[int]) -> None:
        """Merge the waiting telemetry of ``nodes`` (called holding the lock, with entries)."""
        for node in nodes:
            if (entry := self._telemetry.pop(node, None)) is not None:
                merge(self._entries.setdefault(str(node), {}), streams.fleet_fragment(entry))

    # Its own loop ------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._own is None:
                self._own = LoopThread.start("fleet-mirror")
                self._own.submit(self._follow(self._own))

    async def shutdown(self) -> None:
        with self._lock:
            own, self._own = self._own, None
            self._entries, self._text, self._changed = None, None, False
        if own is not None:
            await asyncio.wrap_future(own.submit(_cancel_tasks()))
            await own.stop()

    async def _follow(self, own: LoopThread) -> None:
        while True:
            channel = None
            try:
                channel = await own.layer.new_channel()
                await own.layer.group_add(FLEET_GROUP, channel)
                parts = [
                    asyncio.create_task(self._receive(own, channel)),
                    asyncio.create_task(self._resync(own, channel)),
                ]
                try:
                    done, _ = await asyncio.wait(parts, return_when=asyncio.FIRST_EXCEPTION)
                    for part in done:
                        part.result()  # raises what stopped it
                finally:
                    for part in parts:
                        part.cancel()
            except Exception as exc:  # Redis or the database away: the pages read the snapshot themselves
                log.warning("Fleet mirror: %s; starting again in %.0f s", exc, RETRY_S, exc_info=True)
                with self._lock:
                    self._entries, self._text = None, None
                await asyncio.sleep(RETRY_S)
            finally:
                if channel is not None:  # a member that is gone would be sent every fleet message for a day
                    await _quietly(own.layer.group_discard(FLEET_GROUP, channel))

    async def _resync(self, own: LoopThread, channel: str) -> None:
        """Read the snapshot (joined first, so nothing falls between), then again every ``resync_s``
        or as soon as a page found the mirror disagreeing with the database."""
        self._resync_now = asyncio.Event()
        while True:
            self._resync_now.clear()
            self.replace(await self._snapshot_thread.run(streams.fleet_snapshot)())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._resync_now.wait(), self.resync_s)
            await own.layer.group_add(FLEET_GROUP, channel)  # renewed: memberships expire

    async def _receive(self, own: LoopThread, channel: str) -> None:
        while True:
            self.apply(await own.layer.receive(channel))


def _nonzero(counts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {field: {state: n for state, n in by_state.items() if n} for field, by_state in counts.items()}


async def _cancel_tasks() -> None:
    """Cancel every other task of the running loop and wait for them (the mirror's, on its own loop)."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception as exc:  # it expires by itself
        log.debug("Fleet mirror: leaving the group failed: %s", exc)
