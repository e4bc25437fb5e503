"""The watch registry in the channel layer's Redis, and the live publisher sending node groups only
for watched nodes (every one, when the registry cannot say)."""

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.test import override_settings

from apps.dashboard import watchers
from apps.telemetry.live import LivePublisher
from apps.telemetry.storage import StoredBatch, Submission
from tests.telemetry.conftest import telemetry

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def stored(*node_ids: int) -> StoredBatch:
    return StoredBatch(received_at=None, stored=[Submission(n, telemetry(1)) for n in node_ids])  # type: ignore[arg-type]


def test_a_node_is_watched_while_any_consumer_watches_it(redis_channel_layer):
    async def scenario() -> list[set[int] | None]:
        await watchers.watch("specific.a!1", [1, 2])
        await watchers.watch("specific.b!1", [2])
        seen = [await watchers.watched_nodes()]
        await watchers.unwatch("specific.a!1", [1, 2])
        seen.append(await watchers.watched_nodes())
        return seen

    assert async_to_sync(scenario)() == [{1, 2}, {2}]


def test_a_watch_not_renewed_expires(redis_channel_layer, monkeypatch):
    monkeypatch.setattr(watchers, "WATCH_TTL_S", -1.0)  # already past: a consumer that died long ago
    async_to_sync(watchers.watch)("specific.a!1", [5])
    assert async_to_sync(watchers.watched_nodes)() == set()


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
def test_without_a_redis_layer_the_watched_nodes_are_unknown():
    async_to_sync(watchers.watch)("specific.a!1", [5])
    assert async_to_sync(watchers.watched_nodes)() is None


def watching(nodes: set[int] | None) -> Callable[[], Awaitable[set[int] | None]]:
    async def watched_nodes() -> set[int] | None:
        return nodes

    return watched_nodes


async def listen(groups: Iterable[str]) -> dict[str, str]:
    layer = get_channel_layer()
    channels = {group: await layer.new_channel() for group in groups}
    for group, channel in channels.items():
        await layer.group_add(group, channel)
    return channels


async def receive(channel: str, timeout: float = 5.0) -> dict:
    return await asyncio.wait_for(get_channel_layer().receive(channel), timeout)


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
def test_the_publisher_sends_node_groups_only_for_watched_nodes_and_the_fleet_always():
    async def scenario() -> None:
        channels = await listen(["node.1", "node.2", "fleet"])
        LivePublisher(watched_nodes=watching({2})).note(stored(1, 2))
        assert (await receive(channels["node.2"]))["node"] == 2
        assert sorted(entry["node"] for entry in (await receive(channels["fleet"]))["nodes"]) == [1, 2]
        with pytest.raises(TimeoutError):
            await receive(channels["node.1"], timeout=0.3)

    asyncio.run(scenario())


def test_the_publisher_sends_hundreds_of_groups_at_once_without_exhausting_the_redis_pool(
    redis_channel_layer, settings
):
    nodes = range(1, 301)  # the Redis client's pool holds 100 connections
    # This process's channels share one Redis list, 100 messages deep by default: room for all 300.
    config = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    settings.CHANNEL_LAYERS = {
        **settings.CHANNEL_LAYERS,
        "default": {**settings.CHANNEL_LAYERS["default"], "CONFIG": {**config, "capacity": 1000}},
    }

    async def scenario() -> list[int]:
        channels = await listen(f"node.{n}" for n in nodes)
        LivePublisher(watched_nodes=watching(None)).note(stored(*nodes))
        return [message["node"] for message in await asyncio.gather(*(receive(c) for c in channels.values()))]

    assert asyncio.run(scenario()) == list(nodes)
