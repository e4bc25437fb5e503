"""The life of one agent's WebSocket, whatever the agent says on it: who it is, how it ends, what is
sent on it, and what the rest of the control plane tells it through the channel layer.

The agent authenticates with its node credential (``Authorization: Bearer cpn_...``). A credential
speaks for its own node only (identity.py). Every bad frame gets an Error reply with the protocol's
code (and the frame's seq or command key when it had one), is counted, and the connection goes on
unless the errors come in a flood (guards.py). The messages themselves are consumers.py's.

Commands reach the agent through the channel layer (``agent.deliver``, from apps/jobs by way of
push.py), sent to this connection's own channel, which the Hello records on the node's NodeAgent
row; one that arrives before the Hello is dropped, since the Hello's own resend carries it.

The close codes it uses (1011 a bug of its own, 4401 credential refused, 4403 impersonation, 4409
superseded, 4410 seqs reset, 4426 protocol version, 4429 too many errors) are
``agents.protocol.CloseCode``, which the agent reads too.
"""

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings

from agents import protocol
from apps.core.clock import Clock, LoopClock
from apps.core.websockets import client_gone
from apps.gateway import admission, guards
from apps.gateway.bookkeeping import Bookkeeper, bookkeeper
from apps.gateway.choices import CounterCode
from apps.gateway.models import NodeCredential
from apps.gateway.push import agent_group
from apps.inventory.models import Node

logger = logging.getLogger(__name__)


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


class AgentConnection(AsyncWebsocketConsumer):
    """An authenticated agent socket; subclasses handle what the agent says (``receive``)."""

    credential: NodeCredential | None = None
    node: Node
    said_hello = False
    connected_at: datetime
    closing = False
    clock: Clock = LoopClock()  # what the error window reads; tests move their own

    @functools.cached_property
    def books(self) -> Bookkeeper:
        """The event loop's bookkeeper, looked up once: every message notes something in it."""
        return bookkeeper()

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
            self.books.count_error(None, CounterCode.UNAUTHORIZED, f"{reason} from {self.remote_addr}")
            await self._close(protocol.CloseCode.UNAUTHORIZED, f"Refused: {reason}.")
            return
        self.credential, self.node = credential, credential.node
        self.errors = guards.ErrorWindow(settings.AGENT_ERROR_LIMIT, settings.AGENT_ERROR_WINDOW_S, self.clock)
        self.books.connected(credential.pk)
        await self.channel_layer.group_add(agent_group(self.node.pk), self.channel_name)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The consumer's life; whatever ends it (the agent closing, a bug in a handler, the server stopping),
        the node's connection is cleaned up: a dead socket must not stay in the node's group or count as live."""
        try:
            await self._serve(scope, receive, send)
        except Exception:
            logger.exception("The agent consumer of %s failed; closing its socket", getattr(self, "node", "a node"))
            with contextlib.suppress(Exception):  # the socket may be gone already
                await self.close(code=protocol.CloseCode.INTERNAL_ERROR, reason="Internal server error.")
        finally:
            await self._clean_up()

    async def _serve(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        """Channels' ``AsyncConsumer.__call__``, with a loop that costs less a message: the socket's
        messages and the channel layer's are each read by a loop of its own, and dispatched one at a
        time (a lock), as Channels dispatches them. Channels' ``await_many_dispatch`` made a task for
        the next message and waited on both sources anew for every message (``asyncio.wait``): at
        1,000 agents a second, a twentieth of the server's CPU."""
        self.scope, self.base_send = scope, send
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        sources = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            sources.append(functools.partial(self.channel_layer.receive, self.channel_name))
        one_at_a_time = asyncio.Lock()

        async def follow(source: Callable[[], Awaitable[dict[str, Any]]]) -> None:
            while True:
                message = await source()
                async with one_at_a_time:
                    await self.dispatch(message)

        loops = [asyncio.ensure_future(follow(source)) for source in sources]
        try:
            done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_COMPLETED)
            for loop in done:
                loop.result()  # what ended it: StopConsumer once the socket closed, or a handler's failure
        except StopConsumer:
            pass
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

    async def disconnect(self, code: int) -> None:
        await self._clean_up()

    async def _clean_up(self) -> None:
        """Forget this connection, once: its work beside the message loop, the bookkeeping, the node's
        group and its agent record."""
        credential, self.credential = self.credential, None
        if credential is None:
            return
        self.books.disconnected(credential.pk)
        await self._drop_work_beside()
        try:
            await self.channel_layer.group_discard(agent_group(self.node.pk), self.channel_name)
        finally:
            if self.said_hello:
                await admission.record_disconnect((self.node.pk, self.connected_at))

    async def _drop_work_beside(self) -> None:
        """Stop what the connection's messages left under way beside the message loop (consumers.py)."""

    async def _close(self, code: protocol.CloseCode, reason: str) -> None:
        self.closing = True
        try:
            await self.close(code=code, reason=reason[:120])
        except (OSError, RuntimeError) as exc:
            # The agent had gone already (a superseded socket, typically: its agent is on the new one).
            if not client_gone(exc):
                raise
            logger.debug("The agent at %s had gone before its close (%d)", self.remote_addr, code)

    # Replies ------------------------------------------------------------------------------------

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
        self.books.count_error(self.node.pk, counted_as or code, message)
        await self._send(protocol.Error(code=code, message=message[:2000], seq=seq, stream=stream, key=key))
        if self.errors.add(code) and not self.closing:
            flood = f"{self.errors.limit} errors within {self.errors.window_s:g} s; the last: {message}"
            self.books.count_error(self.node.pk, CounterCode.ERROR_FLOOD, flood)
            await self._close(protocol.CloseCode.TOO_MANY_ERRORS, "Too many bad frames; closing.")

    async def _refuse_revoked(self) -> None:
        await self._reply_error("forbidden", "This credential was revoked; enroll the node again.")
        await self._close(protocol.CloseCode.UNAUTHORIZED, "Credential revoked.")

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
