"""The channel layer: channels_redis's, with a connection pool that waits for a free connection, a
process channel read many messages a round trip and handed out all at once, and many messages sent in
one round trip a process.

channels_redis gives each server process a redis-py pool of 100 connections that raises
``MaxConnectionsError`` the moment all of them are busy. When a thousand agents connect at once (a
server restart; the telemetry benchmark's fleet) each one adds its group and announces itself:
hundreds of Redis round trips at the same moment on a busy event loop. Those past the hundredth
failed, their agents' handshakes with them, the agents came back a second later and the burst never
drained (only 997 of 1,000 nodes connected in three minutes on this 2-core machine). With a
blocking pool a round trip waits, at most ``POOL_WAIT_S``, for a connection another one is about to
release.

It holds ``POOL_CONNECTIONS``, not redis-py's 100: a connection is held for as long as its round trip
takes to come back to a busy event loop, not for Redis's fraction of a millisecond, so at 2,000
agents connecting together on this loaded 2-core machine 100 connections got through fewer than
the agents' group adds and announcements needed, and 425 of them waited out the 10 s (``No
connection available``) and failed their handshakes. Redis allows 10,000 clients; each worker
process holds at most this many.

A server process's consumers share one Redis key (``specific.<process>!``), which channels_redis reads
one message at a time, four round trips each (its backup-queue script, BZPOPMIN, ZADD to the backup,
ZPOPMIN of it), the next only once the last is done. ``receive_single`` here takes up to ``PREFETCH``
messages in one ZPOPMIN (blocking on BZPOPMIN only when there are none). It also puts every one of
them into its consumer's buffer at once: channels_redis's ``receive`` lets one consumer at a time, the
holder of its receive lock, take one message and buffer it for whichever consumer it is for, and each
handoff of the lock is a few turns of the event loop, which on a server holding a thousand agents'
sockets are milliseconds each: one command to each of 1,000 agents was handed to their consumers
13 ms apart, the last 16 s after it was sent (benchmarks/dispatch.py; docs/runs-and-commands.md). The
backup queue is not used for them: a process that dies takes its channel with it (its consumers'
sockets are gone too), and a message taken for a consumer whose receive is cancelled (its socket
closed) is dropped with that consumer's buffer, as channels_redis drops it.

``send_many`` sends many messages, one round trip (a script) for each process's channel key however
many of its consumers they are for, instead of channels_redis's four round trips a message.
"""

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from channels_redis.core import RedisChannelLayer as ChannelsRedisLayer
from redis.asyncio import BlockingConnectionPool

POOL_WAIT_S = 10.0
POOL_CONNECTIONS = 500
PREFETCH = 1000  # messages a process channel's round trip takes at most (a command to each of 1,000 agents)
SEND_CHUNK = 1000  # messages a send_many round trip carries at most: a script holds Redis while it runs

# One channel key's messages, after its expired ones are dropped: as many as its capacity leaves room
# for, in order (each a microsecond after the one before: ZPOPMIN takes ties in byte order, not in the
# order they came), and the count added; those past the room are refused.
SEND_MANY = """
local key, now, expiry, capacity = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, 0, math.floor(now) - expiry)
local room = math.min(capacity - redis.call('ZCARD', key), #ARGV - 3)
for i = 1, room do
    redis.call('ZADD', key, now + i * 0.000001, ARGV[3 + i])
end
if room > 0 then
    redis.call('EXPIRE', key, expiry)
end
return math.max(room, 0)
"""

Message = tuple[str, dict[str, Any]]  # (channel, message)


class RedisChannelLayer(ChannelsRedisLayer):
    def create_pool(self, index: int) -> Any:
        host = dict(self.hosts[index])
        if "address" not in host:  # Sentinel and host/port configurations: as channels_redis makes them
            return super().create_pool(index)
        host.setdefault("max_connections", POOL_CONNECTIONS)
        return BlockingConnectionPool.from_url(host.pop("address"), timeout=POOL_WAIT_S, **host)

    async def receive_single(self, channel: str) -> tuple[Any, dict[str, Any]]:
        """A process channel's (``specific.<process>!``) messages, up to ``PREFETCH`` a round trip: all
        but the last put straight into their consumers' buffers, the last returned for channels_redis's
        ``receive`` to buffer, so that each consumer's messages stay in order. Other channels as
        channels_redis receives them."""
        if not channel.endswith("!"):
            return await super().receive_single(channel)
        assert self.require_valid_channel_name(channel, receive=True), "Channel name invalid"
        channel_key = self.prefix + channel
        *earlier, last = [
            self._addressed(channel, member) for member in await self._take(self.consistent_hash(channel), channel_key)
        ]
        for addressed, message in earlier:
            for consumer_channel in addressed if isinstance(addressed, list) else [addressed]:
                self.receive_buffer[consumer_channel].put_nowait(message)
        return last

    def _addressed(self, channel: str, member: bytes) -> tuple[str | list[str], dict[str, Any]]:
        """A message and the consumer channel it is for, or those of a group_send (a list: one message
        carries a group's consumers of one process)."""
        message = self.deserialize(member)
        if "__asgi_channel__" in message:
            return message.pop("__asgi_channel__"), message
        return channel, message

    async def _take(self, index: int, channel_key: str) -> list[bytes]:
        """Up to ``PREFETCH`` messages, oldest first, once there is one."""
        connection = self.connection(index)
        while True:
            if popped := await connection.zpopmin(channel_key, PREFETCH):
                return [member for member, _ in popped]
            if (result := await connection.bzpopmin(channel_key, timeout=self.brpop_timeout)) is not None:
                return [result[1]]

    async def send_many(self, messages: Sequence[Message]) -> list[Message]:
        """Send each ``(channel, message)``, in order for each channel; returns those a full channel
        refused (what ``send`` raises ``ChannelFull`` for), in order, each channel's after the last it
        took: a caller sending them again keeps each consumer's messages in order."""
        by_key: defaultdict[str, list[tuple[Message, bytes]]] = defaultdict(list)
        for channel, message in messages:
            assert self.require_valid_channel_name(channel), "Channel name not valid"
            assert "__asgi_channel__" not in message
            # A consumer's channel: its process's key, with the consumer's name inside the message.
            addressed = {**message, "__asgi_channel__": channel} if "!" in channel else message
            by_key[self.non_local_name(channel)].append(((channel, message), self.serialize(addressed)))
        refused = await asyncio.gather(*(self._send_to(key, sends) for key, sends in by_key.items()))
        return [sent for each in refused for sent in each]

    async def _send_to(self, channel: str, sends: list[tuple[Message, bytes]]) -> list[Message]:
        """One channel key's messages, ``SEND_CHUNK`` a round trip; those past its capacity refused."""
        connection = self.connection(self.consistent_hash(channel))
        capacity = self.get_capacity(sends[0][0][0])
        for start in range(0, len(sends), SEND_CHUNK):
            chunk = [member for _, member in sends[start : start + SEND_CHUNK]]
            added = await connection.eval(
                SEND_MANY, 1, self.prefix + channel, time.time(), self.expiry, capacity, *chunk
            )
            if added < len(chunk):
                return [sent for sent, _ in sends[start + added :]]
        return []
