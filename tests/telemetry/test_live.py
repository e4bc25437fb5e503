"""Live telemetry: each group gets the newest values at once; what commits during a round of sends goes
in the next one, newest values only."""

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
    live = LivePublisher()
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
async def test_what_commits_while_a_round_is_sent_goes_in_the_next_round_with_the_newest_values(monkeypatch):
    channel = await subscribe("node.3")
    layer, sending, release = get_channel_layer(), asyncio.Event(), asyncio.Event()
    group_send = layer.group_send

    async def slow_group_send(group: str, message: dict) -> None:
        sending.set()
        await release.wait()
        await group_send(group, message)

    monkeypatch.setattr(layer, "group_send", slow_group_send)
    live = LivePublisher()
    live.note(stored(Submission(3, telemetry(1, util=10.0))))
    await sending.wait()
    live.note(stored(Submission(3, telemetry(2, ts=T0 + 1, util=20.0))))
    live.note(stored(Submission(3, telemetry(3, ts=T0 + 2, util=30.0))))
    release.set()

    first, second = await receive(channel), await receive(channel)
    assert (first["gpus"][0]["util_gpu"], second["gpus"][0]["util_gpu"]) == (10.0, 30.0)
    with pytest.raises(TimeoutError):
        await receive(channel, timeout=0.3)  # 20.0 was superseded, never sent


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
async def test_a_replayed_sample_older_than_one_waiting_to_be_sent_is_left_out():
    channel = await subscribe("node.3")
    live = LivePublisher()
    live.note(stored(Submission(3, telemetry(5, ts=T0 + 5, util=50.0)), Submission(3, telemetry(4, ts=T0 + 4))))
    assert (await receive(channel))["ts"] == T0 + 5
    with pytest.raises(TimeoutError):
        await receive(channel, timeout=0.3)


@override_settings(CHANNEL_LAYERS=IN_MEMORY)
async def test_it_collects_every_changed_node_into_one_fleet_message():
    fleet_channel = await subscribe("fleet")
    live = LivePublisher()
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
