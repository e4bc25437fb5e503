"""What the agent consumers of one server process note as they go, written in one batch a second.

At 1,000 nodes a write per message (or even per node every few seconds) would be hundreds of
UPDATEs a second. Instead the consumers note in memory which nodes they heard from, which protocol
errors they answered and what each agent said of its buffer (written only when it changed), and one
task per event loop writes all of it once a second and, in
the same trip, reads back which of the connected credentials were revoked, so that every message
can be checked against a revocation list at most a second old without a query of its own.
"""

import asyncio
import contextlib
import logging
import weakref
from collections import Counter
from collections.abc import Set
from datetime import datetime
from typing import Final

from django.db import connection, transaction
from django.utils import timezone

from apps.core.bulk import update_from_values
from apps.core.process import DatabaseThread, ProcessPart
from apps.gateway import liveness
from apps.gateway.models import GatewayCounter, NodeAgent, NodeCredential

logger = logging.getLogger(__name__)

TICK_S: Final = liveness.LAST_SEEN_RESOLUTION_S

ErrorKey = tuple[int | None, str]  # (node id, or None before a node is known; counter code)
Buffer = tuple[int, int]  # what an agent said of its buffer: samples held, samples ever dropped

# The write has a thread of its own, not the one thread that Channels runs every consumer's other
# database calls of the process on: at 1,000 nodes it takes tens of milliseconds each second, and
# browsers' sign-in checks and agents' events waited behind it.
bookkeeping_thread = DatabaseThread("gateway-bookkeeping")


class Bookkeeper:
    def __init__(self) -> None:
        self._heard: set[int] = set()
        self._errors: dict[ErrorKey, tuple[int, str]] = {}
        self._buffers: dict[int, Buffer] = {}  # node -> what its agent said last, not yet written
        self._written_buffers: dict[int, Buffer] = {}  # node -> what was written last
        self._connections: Counter[int] = Counter()  # live connections per credential id
        self._unusable: frozenset[int] = frozenset()
        self._task: asyncio.Task[None] | None = None

    def connected(self, credential_id: int) -> None:
        self._connections[credential_id] += 1
        self._keep_ticking()

    def disconnected(self, credential_id: int) -> None:
        self._connections[credential_id] -= 1
        if self._connections[credential_id] <= 0:
            del self._connections[credential_id]

    def heard_from(self, node_id: int) -> None:
        self._heard.add(node_id)

    def agent_buffer(self, node_id: int, buffered: int, dropped: int, *, hello: bool = False) -> None:
        """What the node's agent said of its buffer (Hello, Heartbeat): written at the next tick if it
        changed since this bookkeeper last wrote it, and always after a Hello (the node may have been on
        another server process meanwhile)."""
        if hello:
            self._written_buffers.pop(node_id, None)
        if self._written_buffers.get(node_id) != (buffered, dropped):
            self._buffers[node_id] = (buffered, dropped)

    def count_error(self, node_id: int | None, code: str, message: str) -> None:
        count, _ = self._errors.get((node_id, code), (0, ""))
        self._errors[(node_id, code)] = (count + 1, message)
        self._keep_ticking()

    def is_unusable(self, credential_id: int) -> bool:
        """True once the credential was revoked (or its node retired), as of the last tick."""
        return credential_id in self._unusable

    def _keep_ticking(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._tick_while_busy(), name="gateway-bookkeeping")

    async def _tick_while_busy(self) -> None:
        while self._connections or self._heard or self._errors:
            await asyncio.sleep(TICK_S)
            try:
                await self.flush()
            except Exception:  # a database hiccup must not stop liveness: keep the notes, try next tick
                logger.exception("Gateway bookkeeping could not be written; retrying in %.0f s", TICK_S)

    async def flush(self) -> None:
        heard, self._heard = self._heard, set()
        errors, self._errors = self._errors, {}
        buffers, self._buffers = self._buffers, {}
        try:
            self._unusable = await bookkeeping_thread.run(_write)(
                heard, errors, buffers, set(self._connections), timezone.now()
            )
        except BaseException:
            self._heard |= heard
            self._buffers = buffers | self._buffers  # what an agent said since is newer
            for key, (count, message) in errors.items():
                newer_count, newer_message = self._errors.get(key, (0, message))
                self._errors[key] = (count + newer_count, newer_message)
            raise
        self._written_buffers.update(buffers)

    async def close(self) -> None:
        """Stop ticking and write what is noted (the server is stopping)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()


def _write(
    heard: Set[int],
    errors: dict[ErrorKey, tuple[int, str]],
    buffers: dict[int, Buffer],
    credential_ids: Set[int],
    now: datetime,
) -> frozenset[int]:
    liveness.record_heard(heard, now)
    GatewayCounter.add(errors, now)
    with transaction.atomic():
        # Locked in node order first, as the Hellos' upsert of the same rows locks them (admission.py):
        # an UPDATE locks rows as its scan meets them, in no order a concurrent upsert can rely on, and
        # the two deadlocked when a fleet reconnected.
        agents = NodeAgent.objects.select_for_update().filter(node_id__in=buffers).order_by("node_id")
        list(agents.values_list("node_id", flat=True))
        # One UPDATE from a VALUES list, not bulk_update: its CASE per row, built in Python, was most of
        # this thread's time with 2,000 agents reporting their buffers (apps/core/bulk.py).
        table = connection.ops.quote_name(NodeAgent._meta.db_table)
        with connection.cursor() as cursor:
            update_from_values(
                cursor,
                table,
                ["node_id", "held", "dropped"],
                [(node_id, held, dropped) for node_id, (held, dropped) in sorted(buffers.items())],
                set_sql="buffered_samples = v.held, dropped_samples = v.dropped, buffer_reported_at = %s",
                where_sql=f"{table}.node_id = v.node_id",
                params=[connection.ops.adapt_datetimefield_value(now)],
            )
    return NodeCredential.objects.unusable_among(credential_ids)


class Bookkeepers(ProcessPart):
    """One bookkeeper per event loop: one per server process in production (tests run servers on loops
    of their own). Shut down on the server's loop, its bookkeeper writes what it noted."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Bookkeeper] = weakref.WeakKeyDictionary()

    def of_running_loop(self) -> Bookkeeper:
        loop = asyncio.get_running_loop()
        if loop not in self._by_loop:
            self._by_loop[loop] = Bookkeeper()
        return self._by_loop[loop]

    async def shutdown(self) -> None:
        by_loop, self._by_loop = self._by_loop, weakref.WeakKeyDictionary()
        current = by_loop.get(asyncio.get_running_loop())
        if current is not None:
            await current.close()


bookkeepers = Bookkeepers()


def bookkeeper() -> Bookkeeper:
    """The running event loop's bookkeeper."""
    return bookkeepers.of_running_loop()
