"""``ws/live``: the browser's live view of the fleet and of a few nodes (docs/live-stream.md).

Who: a signed-in user with any role (session cookie; the ASGI stack has checked the Origin). A
client that is not is accepted and closed at once with code 4401 (no session) or 4403 (no role), so
the page can tell the two apart; the same checks run again on every client message and every 30 s
(a session that ended closes with 4401, a user deactivated meanwhile with 4403).

Client → server, one JSON object per text frame, at most 4 KB:

    {"subscribe": "fleet"}                  {"unsubscribe": "fleet"}
    {"subscribe": "node", "node": 7}        {"unsubscribe": "node", "node": 7}
    {"subscribe": "failures"}               {"unsubscribe": "failures"}
    {"subscribe": "runs"}                   {"unsubscribe": "runs"}

A client holds the fleet and up to ``MAX_NODE_STREAMS`` nodes. Subscribing again to a stream it
holds sends a fresh snapshot (a way to resynchronise).

Server → client:

- ``{"type": "snapshot", "stream": "fleet", "nodes": {"<id>": entry}}`` and
  ``{"type": "snapshot", "stream": "node", "node": 7, "state": {...}}``: the reply to a subscribe,
  the stream's current state (apps/dashboard/streams.py lists the fields). The failures feed has
  no state: its snapshot, ``{"type": "snapshot", "stream": "failures"}``, only says that every
  failure change from then on will follow. The runs feed is alike: ``{"type": "snapshot", "stream": "runs"}``.
- ``{"type": "delta", "fleet": {"<id>": {...}}, "nodes": {"<id>": {...}}, "failures": {"<id>": {...}}}``:
  what changed since the last message, for every stream the client holds, in one message at most
  once a second. Only values that differ from what the client has are present; a node, GPU or field
  that is absent is unchanged. Apply it by merging: objects key by key, any other value replaces.
  ``failures`` holds each failure that changed, whole, as the REST API shows it; ``runs`` each run
  that changed or made progress, as apps/dashboard/streams.py ``run_summary`` sums it up.
- ``{"type": "unsubscribed", "stream": ..., ["node": 7]}``: the reply to an unsubscribe.
- ``{"type": "error", "reason": ..., "message": ...}``: the reply to a message the server could not
  act on (malformed JSON, unknown key, wrong type, oversize, unknown node, too many nodes); the
  connection goes on.

Updates arrive from the channel layer: ``telemetry.node`` / ``telemetry.fleet`` (apps/dashboard/live.py,
as each ingested batch commits) and ``node.state`` / ``failure.update`` / ``run.update`` (apps/dashboard/publish.py).
They are merged into what the client is owed and sent together, at most once a second, soon after
fresh values arrive (apps/dashboard/pacing.py says when).
"""

import asyncio
import logging
from typing import Annotated, Any, Literal

import msgspec
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from apps.core.clock import Clock, LoopClock
from apps.core.websockets import client_gone
from apps.dashboard import streams, watchers
from apps.dashboard.access import refusal_now, refusal_on_connect
from apps.dashboard.deltas import FAILURES, FEEDS, RUNS, LiveView, Tree
from apps.dashboard.live_streams import live_streams
from apps.dashboard.messages import FLEET_GROUP, node_group
from apps.dashboard.pacing import DeltaPacing

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 4096
MAX_NODE_STREAMS = 20
CLOSE_SERVER_ERROR = 1011


class BadMessage(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


NodeId = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
Stream = Literal["fleet", "node", "failures", "runs"]  # a feed's group is named as the feed


class ClientMessage(msgspec.Struct, forbid_unknown_fields=True):
    subscribe: Stream | None = None
    unsubscribe: Stream | None = None
    node: NodeId | None = None


USAGE = (
    'Expected {"subscribe": "fleet"}, {"subscribe": "failures"}, {"subscribe": "runs"} '
    'or {"subscribe": "node", "node": <id>}, '
    'or the same with "unsubscribe".'
)


def parse(text: str) -> tuple[Literal["subscribe", "unsubscribe"], Stream, int | None]:
    """(action, stream, node id or None) of a client message, or BadMessage saying what is wrong."""
    try:
        message = msgspec.json.decode(text, type=ClientMessage)
    except msgspec.ValidationError as exc:
        raise BadMessage("invalid", f"{exc}. {USAGE}") from None
    except msgspec.DecodeError as exc:
        raise BadMessage("malformed", f"Not a JSON object: {exc}.") from None
    if (message.subscribe is None) == (message.unsubscribe is None):
        raise BadMessage("invalid", f"Send exactly one of `subscribe` and `unsubscribe`. {USAGE}")
    action, stream = ("subscribe", message.subscribe) if message.subscribe else ("unsubscribe", message.unsubscribe)
    if (stream == "node") != (message.node is not None):
        raise BadMessage("invalid", f"`node` (a node id) goes with the node stream, and only with it. {USAGE}")
    return action, stream, message.node


class LiveConsumer(AsyncWebsocketConsumer):
    recheck_s = watchers.WATCH_REFRESH_S  # access checked again, groups and watches renewed
    clock: Clock = LoopClock()  # what the pacing of deltas reads and waits on

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.view = LiveView()
        self.user_id: int | None = None
        self.session_key: str | None = None
        self._closing = False
        self._send_lock = asyncio.Lock()  # a message's view change and its send happen in one order
        self.pacing = DeltaPacing()
        self._offered = asyncio.Event()  # wakes the pusher: fresh values can bring a delta forward
        self._pusher: asyncio.Task[None] | None = None
        self._checker: asyncio.Task[None] | None = None

    # Connection --------------------------------------------------------------------------------

    async def connect(self) -> None:
        await self.accept()
        user = self.scope.get("user")
        refusal = refusal_on_connect(user)
        if refusal is not None:
            live_streams.stats.refused[refusal.name] += 1
            await self._close(refusal)
            return
        live_streams.stats.accepted += 1
        self.user_id, self.session_key = user.pk, self.scope["session"].session_key
        self._checker = asyncio.create_task(self._keep_checking())

    async def disconnect(self, code: int) -> None:
        self._closing = True
        for task in (self._pusher, self._checker):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        groups = [node_group(n) for n in self.view.node_ids()] + self._stream_groups()
        try:
            for group in groups:
                await self.channel_layer.group_discard(group, self.channel_name)
            await watchers.unwatch(self.channel_name, self.view.node_ids())
        except Exception as exc:  # memberships expire by themselves
            log.warning("Live stream cleanup failed: %s", exc)

    async def _close(self, code: int) -> None:
        self._closing = True
        await self.close(code=int(code))

    async def _still_allowed(self) -> bool:
        try:
            refusal = await database_sync_to_async(refusal_now)(self.session_key, self.user_id)
        except Exception:
            log.exception("Could not check a live stream's user; closing it (the browser reconnects).")
            live_streams.stats.closed["error"] += 1
            await self._close(CLOSE_SERVER_ERROR)
            return False
        if refusal is not None:
            live_streams.stats.closed[refusal.name] += 1
            await self._close(refusal)
            return False
        return True

    async def _keep_checking(self) -> None:
        """Every ``recheck_s``: the user may still watch, and the memberships stay fresh (channels_redis
        drops a group member after a day; the watch registry after WATCH_TTL_S)."""
        while not self._closing:
            await asyncio.sleep(self.recheck_s)
            if not await self._still_allowed():
                return
            try:
                for group in self._stream_groups():
                    await self.channel_layer.group_add(group, self.channel_name)
                for node_id in self.view.node_ids():
                    await self.channel_layer.group_add(node_group(node_id), self.channel_name)
                await watchers.watch(self.channel_name, self.view.node_ids())
            except Exception as exc:  # tried again next time
                log.warning("Could not renew a live stream's groups: %s", exc)

    # Client messages ---------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self._closing:
            return
        # Access is checked again on every message; nothing reaches the client, and no group is kept,
        # until the check says yes (it closes the socket when it says no). It runs as a task so that
        # a fleet subscription's work can go on beside it (_subscribe_fleet).
        allowed = asyncio.ensure_future(self._still_allowed())
        try:
            await self._handle(text_data, allowed)
        except BadMessage as exc:
            if await allowed:
                await self._reply_error(exc.reason, str(exc))
        except Exception as exc:
            if client_gone(exc):  # the page closed while its snapshot was on the way
                log.debug("Live stream client left mid-reply: %s", exc)
                return
            log.exception("Live stream request failed")
            if await allowed:
                await self._reply_error("unavailable", "The server could not do that just now; try again.")

    async def _handle(self, text: str | None, allowed: asyncio.Future[bool]) -> None:
        if text is None:
            raise BadMessage("binary", "Send JSON in text frames.")
        size = len(text.encode())
        if size > MAX_MESSAGE_BYTES:
            raise BadMessage("oversize", f"Messages are at most {MAX_MESSAGE_BYTES} bytes; this one has {size}.")
        action, stream, node_id = parse(text)
        if action == "subscribe" and stream == "fleet":
            await self._subscribe_fleet(allowed)
        elif not await allowed:
            return
        elif action == "unsubscribe":
            await self._unsubscribe(stream, node_id)
        elif stream in FEEDS:
            await self._subscribe_feed(stream)
        else:
            await self._subscribe_node(node_id)

    async def _subscribe_fleet(self, allowed: asyncio.Future[bool]) -> None:
        """Joins the group, reads the snapshot (~0.1 s at 1,000 nodes under load) and sends it once the
        access check has said yes. The reading runs on its own thread, beside the check: Channels runs
        every consumer's other database calls in the process on one shared thread, where the snapshot
        would wait behind them and then hold up the agents' own calls. One snapshot is read at a time: a
        reconnect storm of wall screens queues there rather than on the thread the other calls share."""
        await self.channel_layer.group_add(FLEET_GROUP, self.channel_name)  # first: no update missed
        entries = await live_streams.snapshot_thread.run(streams.fleet_snapshot)()
        if not await allowed:
            await self.channel_layer.group_discard(FLEET_GROUP, self.channel_name)
            return
        async with self._send_lock:
            self.view.reset_fleet(entries)
            await self._send_snapshot({"stream": "fleet", "nodes": entries})

    async def _subscribe_feed(self, feed: str) -> None:
        await self.channel_layer.group_add(feed, self.channel_name)
        async with self._send_lock:
            self.view.reset_feed(feed)
            await self._send_snapshot({"stream": feed})

    async def _subscribe_node(self, node_id: int) -> None:
        if not self.view.holds_node(node_id) and len(self.view.node_ids()) >= MAX_NODE_STREAMS:
            raise BadMessage("too_many_nodes", f"At most {MAX_NODE_STREAMS} node streams at once; unsubscribe one.")
        await self.channel_layer.group_add(node_group(node_id), self.channel_name)
        state = await database_sync_to_async(streams.node_snapshot)(node_id)
        if state is None:
            await self.channel_layer.group_discard(node_group(node_id), self.channel_name)
            raise BadMessage("unknown_node", f"There is no node with id {node_id}.")
        await watchers.watch(self.channel_name, [node_id])
        async with self._send_lock:
            self.view.reset_node(node_id, state)
            await self._send_snapshot({"stream": "node", "node": node_id, "state": state})

    async def _unsubscribe(self, stream: Stream, node_id: int | None) -> None:
        if stream == "fleet":
            await self.channel_layer.group_discard(FLEET_GROUP, self.channel_name)
            self.view.drop_fleet()
            reply = {"type": "unsubscribed", "stream": "fleet"}
        elif stream in FEEDS:
            await self.channel_layer.group_discard(stream, self.channel_name)
            self.view.drop_feed(stream)
            reply = {"type": "unsubscribed", "stream": stream}
        else:
            await self.channel_layer.group_discard(node_group(node_id), self.channel_name)
            await watchers.unwatch(self.channel_name, [node_id])
            self.view.drop_node(node_id)
            reply = {"type": "unsubscribed", "stream": "node", "node": node_id}
        async with self._send_lock:
            await self._send_json(reply)

    async def _reply_error(self, reason: str, message: str) -> None:
        live_streams.stats.rejected[reason] += 1
        async with self._send_lock:
            await self._send_json({"type": "error", "reason": reason, "message": message})

    # Updates from the channel layer --------------------------------------------------------------

    async def telemetry_fleet(self, event: dict[str, Any]) -> None:
        noted = [self.view.offer_fleet(entry["node"], streams.fleet_fragment(entry)) for entry in event["nodes"]]
        self._owe_update(any(noted))

    async def telemetry_node(self, event: dict[str, Any]) -> None:
        self._owe_update(self.view.offer_node(event["node"], streams.node_fragment(event)))

    async def node_state(self, event: dict[str, Any]) -> None:
        to_fleet = self.view.offer_fleet(event["node"], event["state"])
        to_node = self.view.offer_node(event["node"], event["state"])
        self._owe_update(to_fleet or to_node)

    async def failure_update(self, event: dict[str, Any]) -> None:
        """From ``node.<id>`` and from ``failures``: a client holding both gets it twice, and sends it once."""
        failure = event["failure"]
        to_node = self.view.offer_node(event["node"], {"failures": {str(failure["id"]): failure}, **event["state"]})
        to_feed = self.view.offer_to_feed(FAILURES, failure["id"], failure)
        self._owe_update(to_node or to_feed)

    async def run_update(self, event: dict[str, Any]) -> None:
        """From ``runs``: a run changed state, made progress or wrote a log line."""
        self._owe_update(self.view.offer_to_feed(RUNS, event["run"], event["summary"]))

    def _stream_groups(self) -> list[str]:
        """The groups of the fleet stream and of the feeds the client holds."""
        held = [FLEET_GROUP] if self.view.holds_fleet() else []
        return held + [feed for feed in FEEDS if self.view.holds_feed(feed)]

    def _owe_update(self, noted: bool) -> None:
        if not noted or self._closing:
            return
        self.pacing.offered(self.clock.now())
        self._offered.set()
        if self._pusher is None or self._pusher.done():
            self._pusher = asyncio.create_task(self._push())

    async def _push(self) -> None:
        """Send what the client is owed when its pacing says so."""
        try:
            while (due := self.pacing.due()) is not None and not self._closing:
                self._offered.clear()
                await self.clock.wait(due, self._offered)
                async with self._send_lock:
                    due = self.pacing.due()  # a snapshot may have gone out meanwhile, fresh values arrived
                    if due is None or self.clock.now() < due:
                        continue
                    delta = self.view.take_delta()
                    self.pacing.settled()
                    if delta:
                        sent_at = self.clock.now()  # when it went, not when the send returned
                        await self._send_json({"type": "delta", **delta})
                        self.pacing.sent(sent_at)
                        live_streams.stats.deltas += 1
        except Exception as exc:
            if client_gone(exc):  # the socket went away mid-send; disconnect() follows
                log.debug("Live stream push stopped, the client left: %s", exc)
                return
            live_streams.stats.failed_pushes += 1  # the client gets nothing more until its next update
            log.warning("Live stream push failed: %s", exc, exc_info=True)

    # Sending -------------------------------------------------------------------------------------

    async def _send_snapshot(self, body: Tree) -> None:
        """Called holding the send lock. A snapshot counts as the second's message: the next delta
        follows it a second later at least."""
        sent_at = self.clock.now()
        await self._send_json({"type": "snapshot", **body})
        self.pacing.sent(sent_at)
        live_streams.stats.snapshots += 1

    async def _send_json(self, message: Tree) -> None:
        await self.send(text_data=msgspec.json.encode(message).decode())
