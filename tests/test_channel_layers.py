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


async def many_to_one_process(count: int) -> tuple[list[tuple[int, int]], int]:
    """``count`` messages to the consumers of one process channel, received: (consumer, n) in order, and
    the process channel's round trips that took them."""
    layer = RedisChannelLayer(hosts=[{"address": settings.REDIS_URL}], prefix=f"test-{uuid.uuid4().hex}", capacity=1000)
    channels = [await layer.new_channel() for _ in range(3)]  # three consumers of this process
    taken = 0
    real_take = layer._take

    async def counted(*args: object) -> list[bytes]:
        nonlocal taken
        taken += 1
        return await real_take(*args)

    layer._take = counted  # type: ignore[method-assign]
    try:
        for n in range(count):
            await layer.send(channels[n % 3], {"type": "test", "n": n})
        received = []
        for n in range(count):
            message = await asyncio.wait_for(layer.receive(channels[n % 3]), timeout=5)
            received.append((channels[n % 3], message["n"]))
        return [(channels.index(channel), n) for channel, n in received], taken
    finally:
        await layer.flush()


def test_a_process_channels_messages_are_taken_many_a_round_trip_each_once_in_order():
    received, round_trips = asyncio.run(many_to_one_process(250))

    assert received == [(n % 3, n) for n in range(250)]
    assert round_trips == 3  # 100 a round trip
