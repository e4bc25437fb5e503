"""The channel layer waits for a free Redis connection instead of failing a burst of round trips, takes a
process channel's messages many a round trip and hands them to every consumer at once, and sends many
messages one round trip a process."""

import asyncio
import uuid

import pytest
from channels_redis.core import RedisChannelLayer as ChannelsRedisLayer
from django.conf import settings
from redis.exceptions import MaxConnectionsError

from controlplane.channel_layers import PREFETCH, RedisChannelLayer


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


def process_layer(**config: object) -> RedisChannelLayer:
    return RedisChannelLayer(hosts=[{"address": settings.REDIS_URL}], prefix=f"test-{uuid.uuid4().hex}", **config)


async def many_to_one_process(count: int) -> tuple[list[tuple[int, int]], int]:
    """``count`` messages to the consumers of one process channel, received: (consumer, n) in order, and
    the process channel's round trips that took them."""
    layer = process_layer(capacity=count)
    channels = [await layer.new_channel() for _ in range(3)]  # three consumers of this process
    taken = 0
    real_take = layer._take

    async def counted(*args: object) -> list[bytes]:
        nonlocal taken
        taken += 1
        return await real_take(*args)

    layer._take = counted  # type: ignore[method-assign]
    try:
        assert await layer.send_many([(channels[n % 3], {"type": "test", "n": n}) for n in range(count)]) == []
        received = []
        for n in range(count):
            message = await asyncio.wait_for(layer.receive(channels[n % 3]), timeout=5)
            received.append((channels[n % 3], message["n"]))
        return [(channels.index(channel), n) for channel, n in received], taken
    finally:
        await layer.flush()


def test_a_process_channels_messages_are_taken_many_a_round_trip_each_once_in_order():
    count = 2 * PREFETCH + 50
    received, round_trips = asyncio.run(many_to_one_process(count))

    assert received == [(n % 3, n) for n in range(count)]
    assert round_trips == 3  # PREFETCH a round trip


async def turns_to_hand_out(consumers: int) -> tuple[int, list[int]]:
    """One message to each of ``consumers`` consumers that wait on their channels: the loop's turns from
    the round trip that took them to the last consumer's message, and what each consumer got."""
    layer = process_layer()
    channels = [await layer.new_channel() for _ in range(consumers)]
    turns, taken_at = 0, None
    loop = asyncio.get_running_loop()
    ticking = True

    def tick() -> None:
        nonlocal turns
        turns += 1
        if ticking:
            loop.call_soon(tick)

    real_take = layer._take

    async def take(*args: object) -> list[bytes]:
        nonlocal taken_at
        members = await real_take(*args)
        taken_at = turns
        return members

    layer._take = take  # type: ignore[method-assign]
    try:
        receivers = [asyncio.ensure_future(layer.receive(channel)) for channel in channels]
        await asyncio.sleep(0.1)  # every consumer waiting, one of them in the round trip
        await layer.send_many([(channel, {"type": "test", "n": n}) for n, channel in enumerate(channels)])
        loop.call_soon(tick)
        got = await asyncio.wait_for(asyncio.gather(*receivers), timeout=10)
        assert taken_at is not None
        return turns - taken_at, [message["n"] for message in got]
    finally:
        ticking = False
        await layer.flush()


def test_what_one_round_trip_takes_reaches_every_waiting_consumer_at_once():
    # channels_redis hands them out one consumer at a time, a few turns each: 300 turns for 100.
    turns, got = asyncio.run(turns_to_hand_out(100))

    assert got == list(range(100))
    assert turns <= 10


async def group_and_direct() -> list[dict[str, object]]:
    """A group message for two consumers of this process, then a message to a third, taken together."""
    layer = process_layer()
    first, second, third = [await layer.new_channel() for _ in range(3)]
    try:
        for channel in (first, second):
            await layer.group_add("pair", channel)
        await layer.group_send("pair", {"type": "test", "to": "pair"})
        await layer.send(third, {"type": "test", "to": "third"})
        return [await asyncio.wait_for(layer.receive(channel), timeout=5) for channel in (third, first, second)]
    finally:
        await layer.flush()


def test_a_group_message_taken_with_others_reaches_each_of_its_consumers():
    assert [message["to"] for message in asyncio.run(group_and_direct())] == ["third", "pair", "pair"]


async def sends_past_capacity() -> tuple[list[int], list[int]]:
    """Five messages to a process whose channel holds three: those refused, and, once the three are
    read and the refused sent again, all five as one consumer received them."""
    layer = process_layer(channel_capacity={"specific.*": 3})
    channel = await layer.new_channel()
    # Each message's bytes sort before the one sent before it: Redis takes equal scores in byte order.
    messages = [(channel, {"backwards": chr(ord("z") - n), "type": "test", "n": n}) for n in range(5)]
    try:
        refused = await layer.send_many(messages)
        received = [(await asyncio.wait_for(layer.receive(channel), timeout=5))["n"] for _ in range(3)]
        assert await layer.send_many(refused) == []
        received += [(await asyncio.wait_for(layer.receive(channel), timeout=5))["n"] for _ in range(2)]
        return [message["n"] for _, message in refused], received
    finally:
        await layer.flush()


def test_send_many_refuses_what_a_full_channel_has_no_room_for_and_keeps_the_order():
    refused, received = asyncio.run(sends_past_capacity())

    assert refused == [3, 4]
    assert received == [0, 1, 2, 3, 4]


async def to_two_processes() -> tuple[list[int], list[int], int]:
    """Messages for the consumers of two processes (two layers) in one send_many: what each received,
    and the round trips it took (one a process)."""
    sender, other = process_layer(), process_layer()
    other.prefix = sender.prefix
    here, there = await sender.new_channel(), await other.new_channel()
    evals = 0
    connection = sender.connection(0)
    real_eval = connection.eval

    async def counted(*args: object, **kwargs: object) -> object:
        nonlocal evals
        evals += 1
        return await real_eval(*args, **kwargs)

    connection.eval = counted  # type: ignore[method-assign]
    try:
        await sender.send_many([(here if n % 2 else there, {"type": "test", "n": n}) for n in range(10)])
        mine = [(await asyncio.wait_for(sender.receive(here), timeout=5))["n"] for _ in range(5)]
        theirs = [(await asyncio.wait_for(other.receive(there), timeout=5))["n"] for _ in range(5)]
        return mine, theirs, evals
    finally:
        await sender.flush()


def test_send_many_is_one_round_trip_a_process_each_consumer_getting_its_own_in_order():
    mine, theirs, round_trips = asyncio.run(to_two_processes())

    assert mine == [1, 3, 5, 7, 9]
    assert theirs == [0, 2, 4, 6, 8]
    assert round_trips == 2
