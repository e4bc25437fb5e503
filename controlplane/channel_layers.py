"""The channel layer: channels_redis's, with a connection pool that waits for a free connection.

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
"""

from typing import Any

from channels_redis.core import RedisChannelLayer as ChannelsRedisLayer
from redis.asyncio import BlockingConnectionPool

POOL_WAIT_S = 10.0
POOL_CONNECTIONS = 500


class RedisChannelLayer(ChannelsRedisLayer):
    def create_pool(self, index: int) -> Any:
        host = dict(self.hosts[index])
        if "address" not in host:  # Sentinel and host/port configurations: as channels_redis makes them
            return super().create_pool(index)
        host.setdefault("max_connections", POOL_CONNECTIONS)
        return BlockingConnectionPool.from_url(host.pop("address"), timeout=POOL_WAIT_S, **host)
