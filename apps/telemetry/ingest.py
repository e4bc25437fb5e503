"""The ingestor: every agent consumer in a server process hands its telemetry here, and it is
written in batches (storage.write_batch) on one writer thread.

A consumer acks the agent only with the seq ``submit`` returns, which is durably stored: rows and
cursor committed together. It awaits each frame's ``submit`` beside its message loop (at most 64
frames a connection, apps/gateway/store_pipeline.py; an agent keeps at most 64 in flight), so a slow
database slows the agents down (they buffer) instead of growing a queue here without bound.

A batch is flushed 250 ms (``TELEMETRY_FLUSH_INTERVAL_MS``) after its first message arrived, or at
once when it holds ``TELEMETRY_FLUSH_MAX_ROWS`` rows. One write at a time, on one dedicated
thread (one database connection, batches committed in arrival order); the next batch fills while
the current one is written.

A server process has one, ``ingestor``: a part of the process (apps/core/process.py), shut down when
the server stops (what is pending is written first). Every ``HEALTH_WRITE_S`` it writes its totals to
its row of IngestProcess, for /metrics (apps/telemetry/metrics/ingest.py).
"""

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from agents.protocol import Telemetry
from apps.core.clock import Clock, LoopClock
from apps.core.events import NodeTelemetry, TelemetryStored, announce
from apps.core.process import DatabaseThread, ProcessPart
from apps.telemetry.models import IngestProcess
from apps.telemetry.storage import StoredBatch, Submission, write_batch

log = logging.getLogger(__name__)

# How often each node's newest-sample rows (LatestGpuSample, read by /metrics) are refreshed.
# Prometheus scrapes every 15-60 s and dcgm-exporter itself collects every 30 s by default, so
# refreshing every 5 s instead of every second loses nothing and spares the database ~4 of 5
# upserts (the browsers' live view comes from the channel layer, every second).
LATEST_REFRESH_S = 5.0
# How often each process writes its totals for /metrics; a process row not written for a day is
# removed by the next process to write its own (a server that stopped for good).
HEALTH_WRITE_S = 5.0
HEALTH_ROWS_KEPT = timedelta(days=1)


@dataclass(slots=True)
class _Pending:
    submission: Submission
    rows: int
    future: asyncio.Future[int]


@dataclass(slots=True)
class IngestStats:
    """Running totals for this process, for benchmarks and health pages."""

    batches: int = 0
    messages_stored: int = 0
    duplicates: int = 0
    gpu_rows: int = 0
    port_rows: int = 0
    failed_batches: int = 0
    last_write_ms: float = 0.0
    lag_s: float | None = None  # the last batch's freshest sample's age when it was stored


class Ingestor(ProcessPart):
    def __init__(
        self,
        *,
        flush_interval_s: float | None = None,
        max_rows: int | None = None,
        writer: Callable[..., StoredBatch] = write_batch,
        clock: Clock | None = None,
    ) -> None:
        self._flush_interval_s = flush_interval_s  # None: the settings in force
        self._max_rows = max_rows
        self.stats = IngestStats()
        self._writer = writer
        self._clock = clock or LoopClock()  # when a batch is due, and when the health row is
        self._health_due: float | None = None  # None: never written by this process
        self._writer_thread = DatabaseThread("telemetry-writer")
        # Highest seq known committed per node, from this process's own commits: lets a replay of
        # what is already stored be answered without a database round trip. The database cursor,
        # read under lock in every batch, stays the authority (another process may be ahead).
        self._stored_seq: dict[int, int] = {}
        self._latest_due: dict[int, float] = {}  # node -> sample ts from which its latest rows are refreshed
        self._pending: list[_Pending] = []
        self._pending_rows = 0
        self._deadline = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def flush_interval_s(self) -> float:
        if self._flush_interval_s is None:
            return settings.TELEMETRY_FLUSH_INTERVAL_MS / 1000
        return self._flush_interval_s

    @property
    def max_rows(self) -> int:
        return settings.TELEMETRY_FLUSH_MAX_ROWS if self._max_rows is None else self._max_rows

    def submit(self, node_id: int, message: Telemetry) -> asyncio.Future[int]:
        """Store ``message`` unless its seq is already stored; the future of the node's stored seq.

        The future raises the database's exception if the batch carrying it could not be written
        (nothing of that batch is stored; the agent resends). A future, not a coroutine: a consumer
        awaits it beside its message loop without a task of its own per frame (apps/gateway/store_pipeline.py).
        """
        loop = self._bind_loop()
        known = self._stored_seq.get(node_id)
        if known is not None and message.seq <= known:
            self.stats.duplicates += 1
            stored = loop.create_future()
            stored.set_result(known)
            return stored
        rows = sum(len(sample.gpus) + len(sample.ports) for sample in message.samples)
        pending = _Pending(Submission(node_id, message), rows, loop.create_future())
        if not self._pending:
            self._deadline = self._clock.now() + self.flush_interval_s
            self._wake.set()
        self._pending.append(pending)
        self._pending_rows += rows
        if self._pending_rows >= self.max_rows:
            self._wake.set()
        return pending.future

    def forget(self, node_id: int) -> None:
        """Check the node's next message against its stored cursor again, not against what this process
        last stored for it: the gateway calls it at every agent's Hello, since an admin may have reset
        the cursor in between (apps/gateway/seqs.py)."""
        self._stored_seq.pop(node_id, None)

    async def shutdown(self) -> None:
        """Write what is pending and stop the flusher, close the writer thread and forget what was
        stored: used again, the ingestor starts afresh (the database cursors stay the authority)."""
        loop = self._loop
        if self._flusher is not None and loop is not None and not loop.is_closed():
            if loop is asyncio.get_running_loop():
                await self._drain()
            elif loop.is_running():  # the server's loop, from another thread
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._drain(), loop))
        self._loop = self._wake = self._flusher = None
        self._pending, self._pending_rows = [], 0
        self._stored_seq.clear()
        self._latest_due.clear()
        await self._writer_thread.shutdown()

    # Internals --------------------------------------------------------------------------------

    async def _drain(self) -> None:
        assert self._flusher is not None
        assert self._wake is not None
        self._closing = True
        self._wake.set()
        try:
            await self._flusher
        finally:
            self._closing = False

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        """Start the flusher on the running event loop (again, if the previous loop has ended)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._wake, self._flusher = loop, asyncio.Event(), None
            self._pending, self._pending_rows = [], 0  # futures of an ended loop have no one awaiting
        if self._flusher is not None and self._flusher.done():
            if not self._flusher.cancelled() and self._flusher.exception():
                log.error("Telemetry flusher failed; restarting it.", exc_info=self._flusher.exception())
            self._flusher = None
        if self._flusher is None:
            self._flusher = loop.create_task(self._run(), name="telemetry-ingest-flusher")
            self._wake.set()  # what is already pending is flushed on its deadline
        return loop

    async def _run(self) -> None:
        assert self._loop is not None
        assert self._wake is not None
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if self._clock.now() < self._deadline and self._pending_rows < self.max_rows and not self._closing:
                self._wake.clear()
                await self._clock.wait(self._deadline, self._wake)
                continue
            await self._flush(self._take_batch())

    def _take_batch(self) -> list[_Pending]:
        taken, rows = 0, 0
        while taken < len(self._pending) and (taken == 0 or rows + self._pending[taken].rows <= self.max_rows):
            rows += self._pending[taken].rows
            taken += 1
        batch, self._pending = self._pending[:taken], self._pending[taken:]
        self._pending_rows -= rows
        return batch

    async def _flush(self, batch: list[_Pending]) -> None:
        assert self._loop is not None
        started = time.perf_counter()
        try:
            stored = await self._writer_thread.run(self._write)([p.submission for p in batch])
        except Exception as exc:
            self.stats.failed_batches += 1
            log.warning("Telemetry batch of %d messages not stored: %s", len(batch), exc)
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
        else:
            self.stats.last_write_ms = (time.perf_counter() - started) * 1000
            self._record(stored)
            for pending in batch:
                if not pending.future.done():  # a consumer that went away cancelled its future
                    pending.future.set_result(stored.cursors[pending.submission.node_id])
        await self._report_health()

    async def _report_health(self) -> None:
        """Every ``HEALTH_WRITE_S``, this process's totals to its IngestProcess row (on the writer thread,
        between two batches). A failure is logged: the ingest itself goes on."""
        now = self._clock.now()
        if self._health_due is not None and now < self._health_due:
            return
        first, self._health_due = self._health_due is None, now + HEALTH_WRITE_S
        try:
            await self._writer_thread.run(_write_health)(replace(self.stats), self._pending_rows, prune=first)
        except Exception as exc:
            log.warning("Ingest health not written: %s", exc)

    def _write(self, batch: list[Submission]) -> StoredBatch:
        """On the writer thread: store the batch, then announce what it stored (a replayed duplicate is
        not announced). Its subscribers run here, committed, before the agents get their acks: the
        failures' telemetry watch raises what the samples show, the live publisher notes the values."""
        stored = self._writer(batch, latest_not_before=self._latest_due)
        if stored.stored:
            announce(TelemetryStored(tuple(NodeTelemetry(s.node_id, s.message) for s in stored.stored)))
        return stored

    def _record(self, stored: StoredBatch) -> None:
        for node_id, seq in stored.cursors.items():
            if seq > self._stored_seq.get(node_id, 0):
                self._stored_seq[node_id] = seq
        for node_id, ts in stored.latest_ts.items():
            self._latest_due[node_id] = ts + LATEST_REFRESH_S
        self.stats.batches += 1
        self.stats.messages_stored += len(stored.stored)
        self.stats.duplicates += stored.duplicates
        self.stats.gpu_rows += stored.gpu_rows
        self.stats.port_rows += stored.port_rows
        freshest = max((sample.ts for s in stored.stored for sample in s.message.samples), default=None)
        if freshest is not None:
            self.stats.lag_s = max(0.0, time.time() - freshest)


def process_name() -> str:
    """How /metrics names this server process: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _write_health(stats: IngestStats, pending_rows: int, *, prune: bool) -> None:
    now = timezone.now()
    if prune:
        IngestProcess.objects.filter(updated_at__lt=now - HEALTH_ROWS_KEPT).delete()
    IngestProcess.objects.bulk_create(
        [
            IngestProcess(
                process=process_name(),
                updated_at=now,
                messages=stats.messages_stored,
                gpu_samples=stats.gpu_rows,
                port_samples=stats.port_rows,
                duplicates=stats.duplicates,
                failed_batches=stats.failed_batches,
                pending_rows=pending_rows,
                lag_s=stats.lag_s,
                write_s=stats.last_write_ms / 1000 if stats.batches else None,
            )
        ],
        update_conflicts=True,
        unique_fields=["process"],
        update_fields=[f.name for f in IngestProcess._meta.concrete_fields if f.name != "process"],
    )


ingestor = Ingestor()  # the server process's, with the settings in force when it is used
