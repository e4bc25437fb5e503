"""Live telemetry through the real Redis channel layer: each watched node's group and the fleet get
the newest values at once; what commits during a round of sends goes in the next one, newest values
only; and the ingest's announcement is what sets it off."""

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from channels_redis.core import RedisChannelLayer

from agents.protocol import Telemetry
from apps.core.events import NodeTelemetry, TelemetryStored
from apps.dashboard import watchers
from apps.dashboard.live import LivePublisher
from apps.inventory.models import Node
from apps.telemetry.ingest import Ingestor
from tests import factories
from tests.dashboard.conftest import listen, receive, waiting
from tests.telemetry.conftest import T0, telemetry

pytestmark = pytest.mark.asyncio

BROWSER = "specific.browser!1"  # a consumer's channel name, as the watch registry records it


def stored(*messages: tuple[int, Telemetry]) -> TelemetryStored:
    return TelemetryStored(tuple(NodeTelemetry(node_id, message) for node_id, message in messages))


@pytest_asyncio.fixture
async def publisher() -> AsyncIterator[LivePublisher]:
    live = LivePublisher()
    yield live
    await live.shutdown()


@pytest.fixture
def node(transactional_db) -> Node:
    return factories.node(factories.cluster(), factories.node_type(nics=0))


async def test_telemetry_the_ingest_stores_reaches_the_nodes_group_and_the_fleet_at_once(redis_channel_layer, node):
    channels = await listen(f"node.{node.pk}", "fleet")
    await watchers.watch(BROWSER, [node.pk])
    ingestor = Ingestor(flush_interval_s=0.05)
    try:
        await ingestor.submit(node.pk, telemetry(1, samples=3, util=40.0))
    finally:
        await ingestor.shutdown()

    message = await receive(channels[f"node.{node.pk}"])
    assert message["type"] == "telemetry.node"
    assert (message["node"], message["ts"]) == (node.pk, T0 + 2)
    assert [g["index"] for g in message["gpus"]] == list(range(8))
    assert message["gpus"][0]["util_gpu"] == 40.0
    fleet = await receive(channels["fleet"])
    assert fleet["type"] == "telemetry.fleet"
    assert fleet["nodes"] == [
        {
            "node": node.pk,
            "ts": T0 + 2,
            "gpus": 8,
            "util_gpu_mean": 40.0,
            "power_w_total": 3200.0,
            "temp_c_max": 60.0,
            "heat": [[40, 400, 60, 39]] * 8,
        }
    ]


async def test_it_sends_a_nodes_group_only_while_someone_watches_it_and_the_fleet_always(
    redis_channel_layer, publisher
):
    channels = await listen("node.1", "node.2", "fleet")
    await watchers.watch(BROWSER, [2])

    publisher.telemetry_stored(stored((1, telemetry(1)), (2, telemetry(1))))

    assert (await receive(channels["node.2"]))["node"] == 2
    assert sorted(entry["node"] for entry in (await receive(channels["fleet"]))["nodes"]) == [1, 2]
    assert await waiting(channels["node.1"]) == []


async def test_what_commits_while_a_round_is_sent_goes_in_the_next_round_with_the_newest_values(
    redis_channel_layer, publisher, monkeypatch
):
    channels = await listen("node.3", "fleet")
    await watchers.watch(BROWSER, [3])
    sending, release = threading.Event(), threading.Event()
    group_send = RedisChannelLayer.group_send

    async def slow_group_send(layer: RedisChannelLayer, group: str, message: dict) -> None:  # the fault: a slow Redis
        sending.set()
        await asyncio.to_thread(release.wait, 10)
        await group_send(layer, group, message)

    monkeypatch.setattr(RedisChannelLayer, "group_send", slow_group_send)  # the publisher's layer is its own
    publisher.telemetry_stored(stored((3, telemetry(1, util=10.0))))
    assert await asyncio.to_thread(sending.wait, 10)
    publisher.telemetry_stored(stored((3, telemetry(2, ts=T0 + 1, util=20.0)), (4, telemetry(1))))
    publisher.telemetry_stored(stored((3, telemetry(3, ts=T0 + 2, util=30.0)), (5, telemetry(1))))
    release.set()

    first, second = await receive(channels["node.3"]), await receive(channels["node.3"])
    assert (first["gpus"][0]["util_gpu"], second["gpus"][0]["util_gpu"]) == (10.0, 30.0)  # 20.0 was superseded
    fleets = [await receive(channels["fleet"]), await receive(channels["fleet"])]
    assert [sorted(entry["node"] for entry in fleet["nodes"]) for fleet in fleets] == [[3], [3, 4, 5]]
    assert await waiting(channels["node.3"]) == []


async def test_a_replayed_sample_older_than_one_waiting_to_be_sent_is_left_out(redis_channel_layer, publisher):
    channels = await listen("node.3")
    await watchers.watch(BROWSER, [3])

    publisher.telemetry_stored(stored((3, telemetry(5, ts=T0 + 5, util=50.0)), (3, telemetry(4, ts=T0 + 4))))

    assert [message["ts"] for message in [await receive(channels["node.3"]), *await waiting(channels["node.3"])]] == [
        T0 + 5
    ]


async def test_it_sends_hundreds_of_groups_at_once_without_exhausting_the_redis_pool(
    redis_channel_layer, publisher, settings
):
    nodes = range(1, 301)  # the Redis client's pool holds 100 connections
    # This process's channels share one Redis list, 100 messages deep by default: room for all 300.
    config = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    settings.CHANNEL_LAYERS = {
        **settings.CHANNEL_LAYERS,
        "default": {**settings.CHANNEL_LAYERS["default"], "CONFIG": {**config, "capacity": 1000}},
    }
    channels = await listen(*(f"node.{n}" for n in nodes))
    await watchers.watch(BROWSER, nodes)

    publisher.telemetry_stored(stored(*((n, telemetry(1)) for n in nodes)))

    received = await asyncio.gather(*(receive(channel) for channel in channels.values()))
    assert [message["node"] for message in received] == list(nodes)


async def test_sends_that_fail_are_counted_and_a_warning_says_why(redis_channel_layer, publisher, monkeypatch, caplog):
    async def refused_group_send(layer: RedisChannelLayer, group: str, message: dict) -> None:  # the fault
        raise ConnectionError("Redis is away")

    await watchers.watch(BROWSER, [3])
    monkeypatch.setattr(RedisChannelLayer, "group_send", refused_group_send)
    with caplog.at_level(logging.WARNING, logger="apps.dashboard.live"):
        publisher.telemetry_stored(stored((3, telemetry(1))))
        await publisher.shutdown()  # sends what is noted first

    assert publisher.failed_sends == 2  # the node's group and the fleet's
    assert "2 of 2 group sends failed: Redis is away" in caplog.text
