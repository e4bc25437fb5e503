"""The channel layer waits for a free Redis connection instead of failing a burst of round trips."""

import asyncio
import uuid

import pytest
from channels_redis.core import RedisChannelLayer as ChannelsRedisLayer
from django.conf import settings
from redis.exceptions import MaxConnectionsError

from controlplane.channel_layers import RedisChannelLayer


async def burst(layer_class: type[ChannelsRedisLayer]) -> None:
    """Fifty group joins at once through a pool of two connections."""
    layer = layer_class(
        hosts=[{"address": settings.REDIS_URL, "max_connections": 2}], prefix=f"test-{uuid.uuid4().hex}"
    )
    try:
        await asyncio.gather(*(layer.group_add("burst", f"specific.burst!{n}") for n in range(50)))
    finally:
        await layer.flush()


def test_a_burst_of_round_trips_waits_for_the_pools_connections():
    asyncio.run(burst(RedisChannelLayer))


def test_channels_redis_own_pool_fails_the_same_burst():
    with pytest.raises(MaxConnectionsError):
        asyncio.run(burst(ChannelsRedisLayer))
