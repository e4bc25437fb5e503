"""Live telemetry: each group gets the newest values at once, then at most once per interval."""

import asyncio

import pytest
from channels.layers import get_channel_layer
from django.test import override_settings

from apps.telemetry.live import LivePublisher, on_batch_stored
from apps.telemetry.storage import StoredBatch, Submission
from tests.telemetry.conftest import T0, telemetry

pytestmark = pytest.mark.asyncio

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def stored(*submissions: Submission) -> StoredBatch:
    return StoredBatch(received_at=None, stored=list(submissions))  # type: ignore[arg-type]


async def subscribe(group: str) -> str:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    return channel


async def receive(channel: str, timeout: float = 1.0) -> dict:
    return await asyncio.wait_for(get_channel_layer().receive(channel), timeout)


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
async def test_it_sends_a_nodes_newest_sample_to_its_group_and_the_fleet_at_once():
    node_channel, fleet_channel = await subscribe("node.7"), await subscribe("fleet")
    live = LivePublisher(interval_s=5.0)
    live.note(stored(Submission(7, telemetry(1, samples=3, util=40.0))))
    message = await receive(node_channel, timeout=0.5)
    assert message["type"] == "telemetry.node"
    assert (message["node"], message["ts"]) == (7, T0 + 2)
    assert [g["index"] for g in message["gpus"]] == list(range(8))
    assert message["gpus"][0]["util_gpu"] == 40.0
    fleet = await receive(fleet_channel, timeout=0.5)
    assert fleet["type"] == "telemetry.fleet"
    assert fleet["nodes"] == [
        {
            "node": 7,
            "ts": T0 + 2,
            "gpus": 8,
            "util_gpu_mean": 40.0,
            "power_w_total": 3200.0,
            "temp_c_max": 60.0,
            "heat": [[40, 400, 60, 39]] * 8,
        }
    ]


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
async def test_it_sends_a_group_at_most_once_per_interval_with_the_newest_values():
    channel = await subscribe("node.3")
    live = LivePublisher(interval_s=0.3)
    loop = asyncio.get_running_loop()
    live.note(stored(Submission(3, telemetry(1, util=10.0))))
    first = await receive(channel)
    sent_first = loop.time()
    live.note(stored(Submission(3, telemetry(2, ts=T0 + 1, util=20.0))))
    live.note(stored(Submission(3, telemetry(3, ts=T0 + 2, util=30.0))))
    second = await receive(channel)
    assert loop.time() - sent_first >= 0.25
    assert (first["gpus"][0]["util_gpu"], second["gpus"][0]["util_gpu"]) == (10.0, 30.0)
    with pytest.raises(TimeoutError):
        await receive(channel, timeout=0.5)  # 20.0 was superseded, never sent


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
async def test_it_collects_every_changed_node_into_one_fleet_message():
    fleet_channel = await subscribe("fleet")
    live = LivePublisher(interval_s=0.2)
    live.note(stored(Submission(1, telemetry(1))))
    assert [n["node"] for n in (await receive(fleet_channel))["nodes"]] == [1]
    live.note(stored(Submission(2, telemetry(1)), Submission(3, telemetry(1))))
    live.note(stored(Submission(4, telemetry(1))))
    assert sorted(n["node"] for n in (await receive(fleet_channel))["nodes"]) == [2, 3, 4]


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
async def test_it_is_the_hook_the_ingestor_calls():
    channel = await subscribe("node.99")
    on_batch_stored(stored(Submission(99, telemetry(1))))
    assert (await receive(channel))["node"] == 99
