"""The node agent's WebSocket, ``/ws/agent``.

The agent authenticates with its node credential (``Authorization: Bearer cpn_...``) and speaks
the messages of ``agents.protocol``: Hello first (answered with Welcome and the seqs already
stored, so a reconnecting agent replays only what is missing, then with the commands it should
have), then Inventory, Telemetry (acked by seq), Events (acked by seq), Heartbeats, and reports
about its commands. A credential speaks for its own node, and its node's hardware, only
(identity.py). What it refuses beyond the protocol (a seq far ahead, a clock ahead, a flood of bad
frames) is in guards.py.

Commands reach the agent through the channel layer (``agent.deliver``, from apps/jobs by way of
push.py), sent to this consumer's own channel, which the Hello records on the node's NodeAgent row;
one that arrives before the Hello is dropped, since the Hello's own resend carries it.

Every bad frame gets an Error reply with the protocol's code (and the frame's seq when it had
one), is counted, and the connection goes on. Database work runs off the event loop; per message
there is none besides what the message stores: liveness, error counts and revocation checks are
batched for all connections of the process (bookkeeping.py), and so is a connection's work at its
start and end (admission.py). An inventory is applied beside the message loop, so a node's
telemetry never waits for its discovery.

The close codes it uses (1011 a bug of its own, 4401 credential refused, 4403 impersonation, 4409
superseded, 4410 seqs reset, 4426 protocol version, 4429 too many errors) are
``agents.protocol.CloseCode``, which the agent reads too.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from agents import protocol
from apps.accounts.audit import record
from apps.core.clock import Clock, LoopClock
from apps.core.process import DatabaseThread
from apps.core.websockets import client_gone
from apps.gateway import admission, guards, sinks
from apps.gateway.bookkeeping import bookkeeper
from apps.gateway.choices import CounterCode
from apps.gateway.discovery import apply_inventory
from apps.gateway.identity import IdentityConflict, record_conflict
from apps.gateway.models import NodeCredential
from apps.gateway.push import agent_group
from apps.inventory.models import Node

logger = logging.getLogger(__name__)

# Inventories are applied on a thread of their own, one at a time as before, not on the sync thread
# every other database call of these consumers queues on: when a thousand agents connect at once,
# their first inventories (tens of queries each) held up the next agents' authentication and Welcome
# past the agents' 10 s handshake timeout, and those agents came back to do it all again.
inventory_thread = DatabaseThread("agent-inventory")
SKEW_REPORT_INTERVAL_S = 60


def _header(scope: dict[str, Any], name: bytes) -> str:
    return next((value.decode("latin-1") for key, value in scope.get("headers", []) if key == name), "")


def bearer_token(scope: dict[str, Any]) -> str | None:
    keyword, _, presented = _header(scope, b"authorization").strip().partition(" ")
    return presented.strip() or None if keyword.lower() == "bearer" else None


def client_address(scope: dict[str, Any]) -> str | None:
    if settings.TRUST_X_FORWARDED_FOR and (forwarded := _header(scope, b"x-forwarded-for")):
        return forwarded.split(",")[0].strip() or None
    client = scope.get("client")
    return client[0] if client else None


class AgentConsumer(AsyncWebsocketConsumer):
    credential: NodeCredential | None = None
    node: Node
    said_hello = False
    discovery: "asyncio.Task[None] | None" = None  # the inventory being applied
    closing = False
    clock: Clock = LoopClock()  # what the error window reads; tests move their own
    wall_clock: Callable[[], float] = staticmethod(time.time)  # what an agent's timestamps are checked against
    skew_reported_at: float | None = None

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch less its ``aclose_old_connections`` before every message: that is a hop to
        the sync thread and back (a tenth of the server's CPU at 2,000 frames a second), and it guards
        nothing here. This consumer touches the database only through ``database_sync_to_async`` (for
        the connection's start and end batched with other agents': admission.py), which closes old
        connections itself in the thread that holds them, and through the ingestor's writer thread,
        which does the same before every batch."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    # Connection ----------------------------------------------------------------------------------

    async def connect(self) -> None:
        self.remote_addr = client_address(self.scope)
        presented = bearer_token(self.scope)
        credential = await admission.authenticate((presented, self.remote_addr)) if presented else None
        # Accept first: a refusal before the handshake reaches the agent as a bare HTTP 403, with no close code.
        try:
            await self.accept()
        except (OSError, RuntimeError) as exc:  # the agent gave up before its turn came: nothing to clean up
            if not client_gone(exc):
                raise
            return
        if credential is None:
            reason = "missing credential" if presented is None else "invalid or revoked credential"
            bookkeeper().count_error(None, CounterCode.UNAUTHORIZED, f"{reason} from {self.remote_addr}")
            await self._close(protocol.CloseCode.UNAUTHORIZED, f"Refused: {reason}.")
            return
        self.credential, self.node = credential, credential.node
        self.errors = guards.ErrorWindow(settings.AGENT_ERROR_LIMIT, settings.AGENT_ERROR_WINDOW_S, self.clock)
        bookkeeper().connected(credential.pk)
        await self.channel_layer.group_add(agent_group(self.node.pk), self.channel_name)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The consumer's life; whatever ends it (the agent closing, a bug in a handler, the server stopping),
        the node's connection is cleaned up: a dead socket must not stay in the node's group or count as live."""
        try:
            await super().__call__(scope, receive, send)
        except Exception:
            logger.exception("The agent consumer of %s failed; closing its socket", getattr(self, "node", "a node"))
            with contextlib.suppress(Exception):  # the socket may be gone already
                await self.close(code=protocol.CloseCode.INTERNAL_ERROR, reason="Internal server error.")
        finally:
            await self._clean_up()

    async def disconnect(self, code: int) -> None:
        await self._clean_up()

    async def _clean_up(self) -> None:
        """Forget this connection, once: in the bookkeeping, the node's group and its agent record."""
        credential, self.credential = self.credential, None
        if credential is None:
            return
        bookkeeper().disconnected(credential.pk)
        if self.discovery is not None and not self.discovery.done():
            # An inventory still queued is dropped, not waited for: its agent sends it again with its
            # next connection. A server stopping with a fleet connected had hundreds queued, and its
            # consumers outlasted the shutdown's grace waiting on them, cancelled with tracebacks.
            self.discovery.cancel()
            await asyncio.gather(self.discovery, return_exceptions=True)
        try:
            await self.channel_layer.group_discard(agent_group(self.node.pk), self.channel_name)
        finally:
            if self.said_hello:
                await admission.record_disconnect((self.node.pk, self.connected_at))

    async def _close(self, code: protocol.CloseCode, reason: str) -> None:
        self.closing = True
        try:
            await self.close(code=code, reason=reason[:120])
        except (OSError, RuntimeError) as exc:
            # The agent had gone already (a superseded socket, typically: its agent is on the new one).
            if not client_gone(exc):
                raise
            logger.debug("The agent at %s had gone before its close (%d)", self.remote_addr, code)

    # Messages from the agent -----------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.credential is None or self.closing:
            return
        if bookkeeper().is_unusable(self.credential.pk):
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
                    bookkeeper().agent_buffer(
                        self.node.pk, message.buffered_samples, message.dropped_samples, hello=True
                    )
            case protocol.Inventory():
                if message.host.hostname != self.node.hostname:
                    await self._refuse_impersonation(message.host.hostname, "inventory")
                    return
                bookkeeper().heard_from(self.node.pk)
                self.discovery = asyncio.create_task(self._discover(self.discovery, message))
            case protocol.Telemetry():
                bookkeeper().heard_from(self.node.pk)
                self._check_frame(message, "telemetry")
                stored = await sinks.store_telemetry(self.node.pk, message)
                await self._ack("telemetry", stored)
            case protocol.Events():
                bookkeeper().heard_from(self.node.pk)
                self._check_frame(message, "events")
                stored = await database_sync_to_async(sinks.store_events)(self.node.pk, message)
                await self._ack("events", stored)
            case protocol.Heartbeat():
                bookkeeper().heard_from(self.node.pk)
                bookkeeper().agent_buffer(self.node.pk, message.buffered_samples, message.dropped_samples)
                if (offset := guards.lead(message, self.wall_clock())) > settings.AGENT_MAX_CLOCK_SKEW_S:
                    await self._clock_skewed(offset)
            case protocol.CommandStarted() | protocol.CommandUpdate() | protocol.CommandResult():
                bookkeeper().heard_from(self.node.pk)
                if (refused := await sinks.store_command_report((self.node.pk, message))) is not None:
                    raise refused

    def _check_frame(self, message: protocol.Telemetry | protocol.Events, stream: protocol.Stream) -> None:
        guards.check_seq(message, self.stored[stream])
        guards.check_clock(message, self.wall_clock(), settings.AGENT_MAX_CLOCK_SKEW_S)

    async def _ack(self, stream: protocol.Stream, stored: int) -> None:
        self.stored[stream] = stored
        await self._send(protocol.Ack(stream=stream, seq=stored))

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
        wait for its discovery (a fleet's first inventories, tens of queries each, queue on their thread)."""
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        try:
            await inventory_thread.run(apply_inventory)(self.node, inventory)
        except IdentityConflict as conflict:
            await self._refuse_conflict(conflict)
        except protocol.ProtocolError as exc:
            await self._reply_error(exc.code, exc.message)
        except Exception:
            logger.exception("Failed to apply the inventory of %s", self.node.hostname)
            await self._reply_error("internal", "The server failed to apply this inventory; it is logged.")

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

    async def _refuse_revoked(self) -> None:
        await self._reply_error("forbidden", "This credential was revoked; enroll the node again.")
        await self._close(protocol.CloseCode.UNAUTHORIZED, "Credential revoked.")

    async def _reply_error(
        self,
        code: protocol.ErrorCode,
        message: str,
        seq: int | None = None,
        stream: protocol.Stream | None = None,
        key: str | None = None,
        *,
        counted_as: CounterCode | None = None,
    ) -> None:
        bookkeeper().count_error(self.node.pk, counted_as or code, message)
        await self._send(protocol.Error(code=code, message=message[:2000], seq=seq, stream=stream, key=key))
        if self.errors.add(code) and not self.closing:
            flood = f"{self.errors.limit} errors within {self.errors.window_s:g} s; the last: {message}"
            bookkeeper().count_error(self.node.pk, CounterCode.ERROR_FLOOD, flood)
            await self._close(protocol.CloseCode.TOO_MANY_ERRORS, "Too many bad frames; closing.")

    async def _send(self, message: protocol.Message) -> None:
        await self._send_frame(protocol.encode(message).decode(), type(message).__name__)

    async def _send_frame(self, frame: str, what: str) -> None:
        try:
            await self.send(text_data=frame)
        except (OSError, RuntimeError) as exc:
            # The agent went away before its reply. Nothing is lost: what was stored stays stored,
            # and the agent, not having the ack, replays it on reconnect, where the seq check drops it;
            # a command it did not get is sent again (apps/jobs).
            if not client_gone(exc):
                raise
            logger.debug("%s disconnected before its %s", self.node.hostname, what)

    # Messages from the rest of the control plane (channel layer) ----------------------------------

    async def agent_superseded(self, event: dict[str, Any]) -> None:
        if event["by"] == self.channel_name or self.closing:
            return
        # An announcement from a connection whose Hello came before ours is not a newer connection, however
        # late it arrives: its agent gave up waiting for the Welcome and is talking on this one. Closing
        # this one for it sent a thousand agents connecting at once round and round.
        if self.said_hello and event.get("hello_at", float("inf")) < self.connected_at.timestamp():
            return
        await self._close(protocol.CloseCode.SUPERSEDED, "A newer connection of this node took over.")

    async def agent_deliver(self, event: dict[str, Any]) -> None:
        """A command or cancel for this node's agent (push.py). Before the Hello there is no agent to
        give it to yet: the Hello's resend (``commands_on_connect``) carries it instead."""
        if self.said_hello and not self.closing:
            await self._send_frame(event["frame"], "command")

    async def seqs_reset(self, event: dict[str, Any]) -> None:
        if not self.closing:
            await self._close(protocol.CloseCode.SEQS_RESET, "The node's stored seqs were reset; reconnect.")

    async def credential_revoked(self, event: dict[str, Any]) -> None:
        if self.credential is not None and event["credential_id"] == self.credential.pk and not self.closing:
            await self._refuse_revoked()
