"""The channel layer: channels_redis's, with a connection pool that waits for a free connection, and
a process channel read many messages a round trip.

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
ZPOPMIN of it), the next only once the last is done. On the event loop of a server holding a thousand
agents' sockets each round trip waits for the loop's turn, and one command to each of 1,000 agents
reached the last agent 9 s after it was sent, by raw group_send or not (benchmarks/dispatch.py).
``receive_single`` here takes up to ``PREFETCH`` messages in one ZPOPMIN (blocking on BZPOPMIN only
when there are none) and hands them out one by one. The backup queue is not used for them: what is
taken stays in this process's memory until handed out, which a cancelled receive does not lose, and
a process that dies takes its channel with it (its consumers' sockets are gone too).
"""

from collections import defaultdict, deque
from typing import Any

from channels_redis.core import RedisChannelLayer as ChannelsRedisLayer
from redis.asyncio import BlockingConnectionPool

POOL_WAIT_S = 10.0
POOL_CONNECTIONS = 500
PREFETCH = 100  # messages a process channel's round trip takes at most


class RedisChannelLayer(ChannelsRedisLayer):
    def create_pool(self, index: int) -> Any:
        host = dict(self.hosts[index])
        if "address" not in host:  # Sentinel and host/port configurations: as channels_redis makes them
            return super().create_pool(index)
        host.setdefault("max_connections", POOL_CONNECTIONS)
        return BlockingConnectionPool.from_url(host.pop("address"), timeout=POOL_WAIT_S, **host)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prefetched: defaultdict[str, deque[bytes]] = defaultdict(deque)  # process channel -> taken

    async def receive_single(self, channel: str) -> tuple[Any, dict[str, Any]]:
        """The next message of a process channel (``specific.<process>!``), from what the last round
        trip took when it took more than one; other channels as channels_redis receives them."""
        if not channel.endswith("!"):
            return await super().receive_single(channel)
        assert self.require_valid_channel_name(channel, receive=True), "Channel name invalid"
        channel_key = self.prefix + channel
        taken = self._prefetched[channel_key]
        if not taken:
            taken.extend(await self._take(self.consistent_hash(channel), channel_key))
        message = self.deserialize(taken.popleft())
        if "__asgi_channel__" in message:  # the consumer's own channel, which the process channel carries
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

    async def flush(self) -> None:
        self._prefetched.clear()
        await super().flush()
