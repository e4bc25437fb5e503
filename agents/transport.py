"""The agent's one WebSocket to the control plane, kept up for as long as the agent runs.

Per connection: send Hello, wait for Welcome (the buffer drops every frame the server already
stores and renumbers never-sent frames it cannot have), send the inventory, then replay what the
buffer holds in seq order and go on live from there: the same loop does both, so the switch from
replay to live loses and repeats nothing. Acks drive ``buffer.ack``; at most ``max_in_flight``
frames per stream wait for theirs, so a long backlog cannot flood a slow server. Error replies are
logged with their code; a frame refused for good ("invalid", "oversize") is dropped from the buffer
so it is not resent forever, one refused for now ("not_ready", "internal") stays buffered and goes
out again after the next Welcome unless a later ack covers it. Commands and cancels from the server
go to the session's command executor (agents/commands/); what it has to say goes out first.

Between connections: exponential backoff with full jitter (attempt n waits a uniform draw in
[0, min(cap, base·2ⁿ)], base 1 s, cap 60 s), reset once a connection has stayed up
``stable_after_s``. A refused credential (``CloseCode.UNAUTHORIZED``, or HTTP 401/403 at the
handshake) is logged as an error and waits the cap: only re-enrolling fixes it, but a credential
restored on the server is picked up again without a restart.
"""

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from agents import __version__
from agents.buffer import TelemetryBuffer
from agents.commands.executor import CommandExecutor
from agents.protocol import (
    STREAMS,
    Ack,
    Cancel,
    CloseCode,
    Command,
    Error,
    Heartbeat,
    Hello,
    ProtocolError,
    Stream,
    Welcome,
    decode_server_message,
    encode,
)

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_INTERVAL_S: Final = 5.0
PERMANENT_REFUSALS: Final = frozenset({"invalid", "oversize"})  # resending the same frame cannot help


class Backoff:
    """Exponential backoff with full jitter; ``rand`` is injectable so tests can pin the draws."""

    def __init__(self, base: float = 1.0, cap: float = 60.0, rand: Callable[[], float] = random.random) -> None:
        self.base = base
        self.cap = cap
        self.rand = rand
        self.attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * 2**self.attempt)
        self.attempt = min(self.attempt + 1, 32)
        return self.rand() * ceiling

    def refused_delay(self) -> float:
        """The wait after a refused credential: the cap, jittered in its upper half so a fleet whose
        credentials were revoked together does not knock again in lockstep."""
        self.attempt = 32
        return self.cap * (0.5 + 0.5 * self.rand())

    def reset(self) -> None:
        self.attempt = 0


class Session(Protocol):
    """What the transport needs from the agent it carries."""

    label: str
    buffer: TelemetryBuffer
    commands: CommandExecutor
    wake: asyncio.Event  # set whenever there is something new to send

    def hello(self) -> Hello: ...

    def welcomed(self, welcome: Welcome) -> None: ...

    def heartbeat(self) -> Heartbeat: ...

    def inventory(self) -> tuple[int, bytes | None]:
        """The current inventory's version (bumped on every change) and its encoded message."""
        ...


class CredentialRefused(Exception):
    pass


class HandshakeFailed(Exception):
    pass


async def _sleep_unless_stopped(delay: float, stop: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay)


class Transport:
    def __init__(
        self,
        url: str,
        credential: str,
        session: Session,
        *,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL_S,
        backoff: Backoff | None = None,
        sleep: Callable[[float, asyncio.Event], Awaitable[None]] = _sleep_unless_stopped,
        stable_after_s: float = 10.0,
        welcome_timeout_s: float = 10.0,
        max_in_flight: int = 64,
    ) -> None:
        self.url = url
        self.credential = credential
        self.session = session
        self.heartbeat_interval = heartbeat_interval
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self.stable_after_s = stable_after_s
        self.welcome_timeout_s = welcome_timeout_s
        self.max_in_flight = max_in_flight
        self.connected = False
        self.connections = 0  # welcomed connections so far
        self._websocket: ClientConnection | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, converse, and reconnect after every loss, until ``stop`` is set."""
        label = self.session.label
        while not stop.is_set():
            try:
                await self._connect_once(stop)
                if stop.is_set():
                    break
                delay = self.backoff.next_delay()
                log.warning("%s: connection to %s closed; reconnecting in %.1f s", label, self.url, delay)
            except CredentialRefused as exc:
                delay = self.backoff.refused_delay()
                log.error(
                    "%s: the control plane refused this node's credential (%s). Re-enroll the node "
                    "(cp-agent enroll --force); retrying in %.0f s",
                    label,
                    exc,
                    delay,
                )
            except (OSError, TimeoutError, ConnectionClosed, InvalidHandshake, HandshakeFailed, ProtocolError) as exc:
                delay = self.backoff.next_delay()
                log.warning("%s: cannot talk to %s (%s); retrying in %.1f s", label, self.url, _describe(exc), delay)
            except InvalidURI as exc:
                delay = self.backoff.refused_delay()
                log.error("%s: the server URL is not a WebSocket URL (%s); retrying in %.0f s", label, exc, delay)
            except Exception:
                # A bug must not end the agent (it would stop reporting for good): log it, reconnect.
                delay = self.backoff.next_delay()
                log.exception("%s: unexpected failure of the connection; retrying in %.1f s", label, delay)
            if not stop.is_set():
                await self.sleep(delay, stop)

    def abort(self) -> None:
        """Drop the socket without a closing handshake, as a node that loses power would."""
        if self._websocket is not None:
            self._websocket.transport.abort()

    async def _connect_once(self, stop: asyncio.Event) -> None:
        try:
            websocket = await connect(
                self.url,
                additional_headers={"Authorization": f"Bearer {self.credential}"},
                user_agent_header=f"cp-agent/{__version__}",
                # Per-message deflate would cost both ends CPU and ~100 KB of zlib state per socket
                # to save a few KB/s per node; the server holds a thousand of these.
                compression=None,
                open_timeout=self.welcome_timeout_s,
            )
        except InvalidStatus as exc:
            if exc.response.status_code in (401, 403):
                raise CredentialRefused(f"HTTP {exc.response.status_code} at the WebSocket handshake") from exc
            raise
        lost: ConnectionClosed | None = None
        try:
            async with websocket:
                self._websocket = websocket
                try:
                    await self._converse(websocket, stop)
                finally:
                    self._websocket = None
        except ConnectionClosed as exc:
            lost = exc
        # Leaving ``async with`` waited for the close: the code is known, however the connection ended
        # (refused before the Welcome, or later once the credential was revoked).
        if websocket.close_code == CloseCode.UNAUTHORIZED:
            raise CredentialRefused(websocket.close_reason or f"close code {CloseCode.UNAUTHORIZED}") from lost
        if lost is not None:
            raise lost

    async def _converse(self, websocket: ClientConnection, stop: asyncio.Event) -> None:
        welcome = await self._handshake(websocket)
        conversation = _Conversation(websocket, self.session, welcome, self.max_in_flight)
        self.connected = True
        self.connections += 1
        loop = asyncio.get_running_loop()
        established = loop.time()
        log.info("%s: connected to %s as node %d", self.session.label, self.url, welcome.node_id)
        try:
            await conversation.run(stop, self.heartbeat_interval)
        finally:
            self.connected = False
            if loop.time() - established >= self.stable_after_s:
                self.backoff.reset()

    async def _handshake(self, websocket: ClientConnection) -> Welcome:
        await websocket.send(encode(self.session.hello()), text=True)
        try:
            reply = decode_server_message(await asyncio.wait_for(websocket.recv(), self.welcome_timeout_s))
        except TimeoutError as exc:
            raise HandshakeFailed(f"no Welcome within {self.welcome_timeout_s:.0f} s") from exc
        if isinstance(reply, Error):
            raise HandshakeFailed(f"the server answered Hello with {reply.code}: {reply.message}")
        if not isinstance(reply, Welcome):
            raise HandshakeFailed(f"the server answered Hello with {type(reply).__name__}, not Welcome")
        self.session.welcomed(reply)
        return reply


class _Conversation:
    """One welcomed connection: the send, receive and heartbeat loops and what they share."""

    def __init__(self, websocket: ClientConnection, session: Session, welcome: Welcome, max_in_flight: int) -> None:
        self.websocket = websocket
        self.session = session
        self.buffer = session.buffer
        self.max_in_flight = max_in_flight
        # Everything up to the Welcome's seqs is stored (the buffer dropped it): send what follows.
        self.sent: dict[Stream, int] = {"telemetry": welcome.last_telemetry_seq, "events": welcome.last_events_seq}
        self.in_flight: dict[Stream, deque[int]] = {stream: deque() for stream in STREAMS}
        self.inventory_sent: int | None = None

    async def run(self, stop: asyncio.Event, heartbeat_interval: float) -> None:
        loops = {
            asyncio.create_task(self._send_loop()),
            asyncio.create_task(self._receive_loop()),
            asyncio.create_task(self._heartbeat_loop(heartbeat_interval)),
        }
        stopped = asyncio.create_task(stop.wait())
        done, pending = await asyncio.wait(loops | {stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if stopped in done:
            await self.websocket.close(CloseCode.GOING_AWAY, "agent stopping")
            return
        for task in done:
            failure = task.exception()
            if failure is not None and not isinstance(failure, ConnectionClosed):
                # A bug here must not end the agent: log it loudly, drop this connection, reconnect.
                log.error("%s: connection loop failed", self.session.label, exc_info=failure)
                await self.websocket.close(CloseCode.INTERNAL_ERROR, "agent error")

    async def _send_loop(self) -> None:
        wake = self.session.wake
        commands = self.session.commands
        while True:
            wake.clear()
            while (frame := commands.next_frame()) is not None:
                await self.websocket.send(frame, text=True)
                commands.sent()
            version, inventory = self.session.inventory()
            if inventory is not None and version != self.inventory_sent:
                await self.websocket.send(inventory, text=True)
                self.inventory_sent = version
            progressed = False
            for stream in ("events", "telemetry"):  # an XID should not queue behind a telemetry backlog
                if len(self.in_flight[stream]) >= self.max_in_flight:
                    continue
                frame = self.buffer.next_frame(stream, self.sent[stream])
                if frame is not None:
                    await self.websocket.send(frame.data, text=True)
                    self.sent[stream] = frame.seq
                    self.in_flight[stream].append(frame.seq)
                    progressed = True
            if not progressed:
                await wake.wait()

    async def _receive_loop(self) -> None:
        async for raw in self.websocket:
            try:
                message = decode_server_message(raw)
            except ProtocolError as exc:
                log.warning("%s: ignoring a bad message from the server (%s: %s)", self.session.label, exc.code, exc)
                if exc.key is not None:  # a command this agent cannot read: refused, so it is not sent forever
                    self.session.commands.refuse_unreadable(exc.key, exc.message)
                continue
            if isinstance(message, Command | Cancel):
                self.session.commands.receive(message)
            elif isinstance(message, Ack):
                self._acknowledged(message.stream, message.seq)
            elif isinstance(message, Error):
                self._refused(message)
            else:
                log.warning("%s: ignoring an unexpected %s", self.session.label, type(message).__name__)

    async def _heartbeat_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.websocket.send(encode(self.session.heartbeat()), text=True)

    def _acknowledged(self, stream: Stream, seq: int) -> None:
        # Never past what this connection sent: a confused server must not make the agent forget unsent frames.
        seq = min(seq, self.sent[stream])
        self.buffer.ack(stream, seq)
        in_flight = self.in_flight[stream]
        was_full = len(in_flight) >= self.max_in_flight
        while in_flight and in_flight[0] <= seq:
            in_flight.popleft()
        # Only a full window held the send loop back; waking it for every other ack cost the fleet
        # simulator a task switch per frame (it holds a thousand of these connections).
        if was_full and len(in_flight) < self.max_in_flight:
            self.session.wake.set()

    def _refused(self, error: Error) -> None:
        label = self.session.label
        if error.seq is None:
            log.warning("%s: the server reported %s: %s", label, error.code, error.message)
            return
        stream = error.stream or self._stream_in_flight(error.seq)
        if stream is None:
            log.error(
                "%s: the server refused seq %d (%s: %s), which could be either stream's; keeping it",
                label,
                error.seq,
                error.code,
                error.message,
            )
            return
        if error.seq in self.in_flight[stream]:
            self.in_flight[stream].remove(error.seq)
            self.session.wake.set()
        if error.code in PERMANENT_REFUSALS:
            dropped = self.buffer.discard(stream, error.seq, f"refused by the server ({error.code})")
            log.error(
                "%s: the server refused %s seq %d for good (%s: %s); dropped its %d item(s)",
                label,
                stream,
                error.seq,
                error.code,
                error.message,
                dropped,
            )
        else:
            log.warning(
                "%s: the server could not take %s seq %d now (%s: %s); it stays buffered",
                label,
                stream,
                error.seq,
                error.code,
                error.message,
            )

    def _stream_in_flight(self, seq: int) -> Stream | None:
        """For a server that leaves ``Error.stream`` out: the one stream with that seq in flight, if only one."""
        candidates = [stream for stream in STREAMS if seq in self.in_flight[stream]]
        return candidates[0] if len(candidates) == 1 else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, InvalidStatus):
        return f"HTTP {exc.response.status_code} at the WebSocket handshake"
    if isinstance(exc, ConnectionClosed):
        return f"closed with code {exc.rcvd.code if exc.rcvd else 'none'}"
    return str(exc) or type(exc).__name__
