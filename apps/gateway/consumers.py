"""The node agent's WebSocket, ``/ws/agent``: what the agent says on it (the socket's own life, who
it is and how it ends, is connection.py's).

The agent speaks the messages of ``agents.protocol``: Hello first (answered with Welcome and the
seqs already stored, so a reconnecting agent replays only what is missing, then with the commands it
should have), then Inventory, Telemetry (acked by seq), Events (acked by seq), Heartbeats, and
reports about its commands. A credential speaks for its own node, and its node's hardware, only
(identity.py). What it refuses beyond the protocol (a seq far ahead, a clock ahead, a flood of bad
frames) is in guards.py.

Database work runs off the event loop; per message there is none besides what the message stores:
liveness, error counts and revocation checks are batched for all connections of the process
(bookkeeping.py), and so is a connection's work at its start and end (admission.py). An inventory is
applied, and telemetry and command reports stored (store_pipeline.py), beside the message loop, so
that the socket is read, and its pings answered, while they wait for the database.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from agents import protocol
from apps.accounts.audit import record
from apps.core.batching import Batched
from apps.core.process import DatabaseThread
from apps.gateway import admission, guards, sinks
from apps.gateway.choices import CounterCode
from apps.gateway.connection import AgentConnection
from apps.gateway.discovery import apply_inventories
from apps.gateway.identity import IdentityConflict, record_conflict
from apps.gateway.push import agent_group
from apps.gateway.store_pipeline import StorePipeline

logger = logging.getLogger(__name__)

# Inventories are applied on a thread of their own, not on the sync thread every other database call
# of these consumers queues on: when a thousand agents connect at once, their first inventories held
# up the next agents' authentication and Welcome past the agents' 10 s handshake timeout, and those
# agents came back to do it all again. Whatever arrived while a batch was applied goes in the next,
# in a few statements for the batch (discovery.py).
inventory_thread = DatabaseThread("agent-inventory")
inventories = Batched(apply_inventories, run=inventory_thread.run, max_batch=100)
SKEW_REPORT_INTERVAL_S = 60
# Telemetry frames of one connection on their way into storage: all an agent keeps in flight
# (agents/transport.py). Its command reports travel on the same socket behind them, and a window of
# one frame held a fleet's command_started behind its telemetry backlog for most of a minute
# (dispatch.py at 1,000 agents: 0 of 1,000 acknowledged within 60 s, no socket lost).
TELEMETRY_IN_FLIGHT = 64
# Command reports of one connection on their way into storage: an agent answering a fleet's resends
# sends a few, one relaying a check's log lines a few a second, and the agent itself holds at most
# 1,000 lines (agents/commands/executor.py).
REPORTS_IN_FLIGHT = 1000


class AgentConsumer(AgentConnection):
    discovery: "asyncio.Task[None] | None" = None  # the inventory being applied
    telemetry: "StorePipeline[protocol.Telemetry, int] | None" = None  # from the Hello on
    reports: "StorePipeline[sinks.CommandReport, protocol.ProtocolError | None] | None" = None  # from the Hello on
    wall_clock: Callable[[], float] = staticmethod(time.time)  # what an agent's timestamps are checked against
    skew_reported_at: float | None = None

    # Messages from the agent -----------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.credential is None or self.closing:
            return
        if self.books.is_unusable(self.credential.pk):
            await self._refuse_revoked()
            return
        if bytes_data is not None:
            await self._reply_error("malformed", "Binary frames are not accepted; send each message as JSON text.")
            return
        frame = (text_data or "").encode()
        try:
            message = protocol.decode_agent_message(frame)
        except protocol.ProtocolError as exc:
            await self._reply_error(exc.code, exc.message, exc.seq, exc.stream, exc.key)
            return
        refused = protocol.message_seq(message)
        try:
            await self._handle(message)
        except guards.Refused as exc:
            await self._reply_error(exc.code, exc.message, *refused, counted_as=exc.counter)
            if isinstance(exc, guards.ClockAhead):
                await self._clock_skewed(exc.offset_s)
        except protocol.ProtocolError as exc:
            await self._reply_error(exc.code, exc.message, *refused, exc.key)
        except Exception:  # one message failing to store must not take the node's connection down
            logger.exception("Failed to handle %s from %s", type(message).__name__, self.node.hostname)
            await self._reply_error("internal", "The server failed to handle this message; it is logged.", *refused)

    async def _handle(self, message: protocol.AgentMessage) -> None:
        if not self.said_hello and not isinstance(message, protocol.Hello):
            tag = type(message).__struct_config__.tag
            raise protocol.ProtocolError("invalid", f"Send hello first; {tag!r} came before it.")
        match message:
            case protocol.Hello():
                await self._hello(message)
                if self.said_hello:
                    self.books.agent_buffer(self.node.pk, message.buffered_samples, message.dropped_samples, hello=True)
            case protocol.Inventory():
                if message.host.hostname != self.node.hostname:
                    await self._refuse_impersonation(message.host.hostname, "inventory")
                    return
                self.books.heard_from(self.node.pk)
                self.discovery = asyncio.create_task(self._discover(self.discovery, message))
            case protocol.Telemetry():
                self.books.heard_from(self.node.pk)
                self._check_frame(message, "telemetry")
                assert self.telemetry is not None  # made at the Hello
                await self.telemetry.put(message)
            case protocol.Events():
                self.books.heard_from(self.node.pk)
                self._check_frame(message, "events")
                stored = await database_sync_to_async(sinks.store_events)(self.node.pk, message)
                await self._ack("events", stored)
            case protocol.Heartbeat():
                self.books.heard_from(self.node.pk)
                self.books.agent_buffer(self.node.pk, message.buffered_samples, message.dropped_samples)
                if (offset := guards.lead(message, self.wall_clock())) > settings.AGENT_MAX_CLOCK_SKEW_S:
                    await self._clock_skewed(offset)
            case protocol.CommandStarted() | protocol.CommandUpdate() | protocol.CommandResult():
                self.books.heard_from(self.node.pk)
                assert self.reports is not None  # made at the Hello
                await self.reports.put(message)

    def _check_frame(self, message: protocol.Telemetry | protocol.Events, stream: protocol.Stream) -> None:
        guards.check_seq(message, self.stored[stream])
        guards.check_clock(message, self.wall_clock(), settings.AGENT_MAX_CLOCK_SKEW_S)

    async def _ack(self, stream: protocol.Stream, stored: int) -> None:
        self.stored[stream] = max(self.stored[stream], stored)
        await self._send(protocol.Ack(stream=stream, seq=stored))

    def _store_telemetry(self, frame: protocol.Telemetry) -> Awaitable[int]:
        return sinks.store_telemetry(self.node.pk, frame)  # the ingestor's future: no task of its own per frame

    async def _telemetry_stored(self, frame: protocol.Telemetry, stored: int | Exception) -> None:
        """Ack the node's stored seq once the frame's batch is committed (in seq order: batches commit in
        the order they came), or say the frame failed: the agent sends it again."""
        if not isinstance(stored, Exception):
            await self._ack("telemetry", stored)
            return
        logger.error("Failed to store telemetry %d from %s", frame.seq, self.node.hostname, exc_info=stored)
        message = "The server failed to handle this message; it is logged."
        await self._reply_error("internal", message, frame.seq, "telemetry")

    async def _hello(self, hello: protocol.Hello) -> None:
        if self.said_hello:
            raise protocol.ProtocolError("invalid", "Hello was already received on this connection.")
        if hello.protocol != protocol.PROTOCOL_VERSION:
            message = f"This server speaks protocol {protocol.PROTOCOL_VERSION}, not {hello.protocol}."
            await self._reply_error("protocol_version", message)
            await self._close(protocol.CloseCode.PROTOCOL_VERSION, message)
            return
        if hello.hostname != self.node.hostname:
            await self._refuse_impersonation(hello.hostname, "hello")
            return
        self.connected_at = timezone.now()
        welcomed = await admission.welcome(
            admission.Arrival(self.node, hello, self.remote_addr, self.connected_at, self.channel_name)
        )
        self.said_hello = True
        self.telemetry = StorePipeline(
            f"telemetry-{self.node.pk}",
            self._store_telemetry,
            self._telemetry_stored,
            max_in_flight=TELEMETRY_IN_FLIGHT,
        )
        self.reports = StorePipeline(
            f"command-reports-{self.node.pk}", self._store_report, self._report_stored, max_in_flight=REPORTS_IN_FLIGHT
        )
        self.stored: dict[protocol.Stream, int] = {"telemetry": welcomed.telemetry_seq, "events": welcomed.events_seq}
        sinks.forget_stored_seq(self.node.pk)  # an admin may have reset the node's seqs since it was last here
        # One socket per node: a reconnecting agent's half-dead earlier socket (or a second agent
        # with a copied credential) is closed, so two streams never interleave one node's seqs.
        await self.channel_layer.group_send(
            agent_group(self.node.pk),
            {"type": "agent.superseded", "by": self.channel_name, "hello_at": self.connected_at.timestamp()},
        )
        await self._send(
            protocol.Welcome(
                node_id=self.node.pk,
                hostname=self.node.hostname,
                telemetry_interval_s=settings.AGENT_TELEMETRY_INTERVAL_S,
                last_telemetry_seq=welcomed.telemetry_seq,
                last_events_seq=welcomed.events_seq,
            )
        )
        for frame in welcomed.commands:
            await self._send_frame(frame.decode(), "command")

    async def _discover(self, previous: "asyncio.Task[None] | None", inventory: protocol.Inventory) -> None:
        """Apply an inventory beside the message loop, after the one before it: a node's telemetry does not
        wait for its discovery (a fleet's first inventories queue on their thread)."""
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        try:
            outcome = await inventories((self.node, inventory))
        except Exception:
            logger.exception("Failed to apply the inventory of %s", self.node.hostname)
            await self._reply_error("internal", "The server failed to apply this inventory; it is logged.")
            return
        if isinstance(outcome, IdentityConflict):
            await self._refuse_conflict(outcome)
        elif isinstance(outcome, protocol.ProtocolError):
            await self._reply_error(outcome.code, outcome.message)

    async def _store_report(self, report: sinks.CommandReport) -> protocol.ProtocolError | None:
        return await sinks.store_command_report((self.node.pk, report))

    async def _report_stored(
        self, report: sinks.CommandReport, outcome: protocol.ProtocolError | Exception | None
    ) -> None:
        """A report refused (a key not of this node's commands) gets its Error; one the store failed on,
        an internal Error naming its key (the server asks again about its command)."""
        if isinstance(outcome, protocol.ProtocolError):
            await self._reply_error(outcome.code, outcome.message, key=outcome.key or report.key)
        elif isinstance(outcome, Exception):
            logger.error("Failed to store %s from %s", type(report).__name__, self.node.hostname, exc_info=outcome)
            message = "The server failed to store this command report; it is logged."
            await self._reply_error("internal", message, key=report.key)

    # Refusals ----------------------------------------------------------------------------------

    async def _refuse_impersonation(self, claimed: str, where: str) -> None:
        assert self.credential is not None
        await database_sync_to_async(record)(
            "agent.impersonation",
            actor=f"agent:{self.node.hostname}",
            obj=self.node,
            claimed_hostname=claimed,
            message=where,
            credential=self.credential.key_id,
            remote_addr=self.remote_addr,
        )
        text = f"This credential speaks for {self.node.hostname} only; refused {where} as {claimed}."
        await self._reply_error("forbidden", text)
        await self._close(protocol.CloseCode.FORBIDDEN, text)

    async def _refuse_conflict(self, conflict: IdentityConflict) -> None:
        assert self.credential is not None
        await database_sync_to_async(record_conflict)(
            self.node, conflict, credential=self.credential.key_id, remote_addr=self.remote_addr
        )
        await self._reply_error(conflict.code, conflict.message, counted_as=CounterCode.IDENTITY_CONFLICT)

    async def _clock_skewed(self, offset_s: float) -> None:
        """Raise the node's clock-skew failure, at most once a minute per connection (a fleet whose time
        server is down would otherwise write a failure repeat per frame)."""
        now = self.clock.now()
        if self.skew_reported_at is None or now - self.skew_reported_at >= SKEW_REPORT_INTERVAL_S:
            self.skew_reported_at = now
            await database_sync_to_async(sinks.node_clock_skewed)(self.node.pk, offset_s)

    async def _drop_work_beside(self) -> None:
        # An inventory still queued is dropped, not waited for: its agent sends it again with its
        # next connection. A server stopping with a fleet connected had hundreds queued, and its
        # consumers outlasted the shutdown's grace waiting on them, cancelled with tracebacks.
        if self.discovery is not None and not self.discovery.done():
            self.discovery.cancel()
            await asyncio.gather(self.discovery, return_exceptions=True)
        # The agent replays telemetry not acked; a command whose start or result was dropped is still
        # open on its row, so it is sent again after the agent's next Hello (``frames_on_connect``) and,
        # while unacknowledged, every JOBS_ACK_TIMEOUT_S, and the agent answers from its store without
        # running it twice. Progress and log lines are not asked for again: best effort on the agent too.
        for pipeline in (self.telemetry, self.reports):
            if pipeline is not None:
                await pipeline.drop()
