"""Telemetry sent at most every send interval: the samples taken meanwhile held on the agent and sent
in one frame, events (XIDs) sent at once, nothing lost or sent twice across crashes and stops; the
setting in the config file and on the command line."""

import asyncio
import json

import pytest

from agents.batching import SampleBatch, samples_per_frame
from agents.cli import main
from agents.commandline import EXIT_CONFIG, EXIT_OK
from agents.protocol import MAX_FRAME_BYTES, MAX_SAMPLES_PER_FRAME, GpuEvent
from agents.simulator.fleet import run_fleet
from tests.agents.doubles import FakeCollector, wait_until
from tests.agents.test_transport import remaining_timestamps, running

HOUR = 3600.0  # an agent sampling this seldom takes one sample at start, then only those a test asks for

# The batch ---------------------------------------------------------------------------------------


def fill(batch: SampleBatch, count: int, *, interval: float, start: float = 0.0) -> list[list[bytes]]:
    """Add ``count`` samples one ``interval`` apart; every frame that fell due, in order."""
    due: list[list[bytes]] = []
    for i in range(count):
        due += batch.add(b"s%d" % i, start + i * interval, interval)
    return due


@pytest.mark.parametrize(
    ("send_interval", "interval", "expected"),
    [(0.0, 1.0, 1), (0.5, 1.0, 1), (1.0, 0.25, 4), (1.0, 0.3, 4), (0.9, 0.3, 3), (60.0, 0.1, 600)],
)
def test_a_frame_holds_a_send_intervals_worth_of_samples_rounded_up_and_at_least_one(send_interval, interval, expected):
    assert samples_per_frame(send_interval, interval) == expected


@pytest.mark.parametrize("send_interval", [0.0, 0.5, 1.0])
def test_a_send_interval_of_zero_or_up_to_the_interval_sends_each_sample_at_once(send_interval):
    batch = SampleBatch(send_interval)

    assert fill(batch, 3, interval=1.0) == [[b"s0"], [b"s1"], [b"s2"]]
    assert len(batch) == 0


def test_samples_are_held_until_the_send_interval_and_go_out_together():
    batch = SampleBatch(1.0)

    assert fill(batch, 3, interval=0.25) == []
    assert len(batch) == 3
    assert batch.add(b"s3", 0.75, 0.25) == [[b"s0", b"s1", b"s2", b"s3"]]  # a frame a second, not one in 1.25 s
    assert len(batch) == 0


def test_a_frame_is_due_after_the_count_of_samples_even_where_decimals_are_inexact():
    batch = SampleBatch(0.9)

    assert [len(frame) for frame in fill(batch, 6, interval=0.3)] == [3, 3]  # 3 x 0.3 < 0.9 in binary


def test_a_send_interval_that_is_no_multiple_of_the_interval_never_sends_more_often_than_asked():
    batch = SampleBatch(1.0)

    assert [len(frame) for frame in fill(batch, 8, interval=0.3)] == [4, 4]  # every 1.2 s, not every 0.9 s


def test_a_stalled_collector_holds_no_sample_longer_than_the_send_interval():
    batch = SampleBatch(1.0)
    batch.add(b"s0", 100.0, 0.25)

    assert batch.add(None, 100.5, 0.25) == []  # a tick that gave no sample
    assert batch.add(b"s1", 101.0, 0.25) == [[b"s0", b"s1"]]  # ticks were skipped: the oldest is 1 s old
    batch.add(b"s2", 102.0, 0.25)
    assert batch.add(None, 103.0, 0.25) == [[b"s2"]]  # the collector failing meanwhile


def test_the_count_follows_an_interval_the_control_plane_changed():
    batch = SampleBatch(1.0)
    batch.add(b"s0", 0.0, 0.25)

    assert batch.add(b"s1", 0.25, 0.5) == [[b"s0", b"s1"]]  # sampling every 0.5 s now: two make a second


def test_a_sample_that_would_pass_a_frame_limit_starts_the_next_frame():
    by_count = SampleBatch(60.0)
    frames = fill(by_count, MAX_SAMPLES_PER_FRAME + 1, interval=0.01)
    assert [len(frame) for frame in frames] == [MAX_SAMPLES_PER_FRAME]
    assert len(by_count) == 1

    by_bytes = SampleBatch(60.0)
    large = b"x" * (MAX_FRAME_BYTES // 3)
    due = [by_bytes.add(large, i * 0.1, 0.1) for i in range(3)]
    assert due == [[], [], [[large, large]]]  # three would not fit 1 MiB with the frame around them
    assert len(by_bytes) == 1


# The agent ---------------------------------------------------------------------------------------


def xid(collector: FakeCollector, text: str) -> None:
    collector.pending_events.append(GpuEvent(ts=1_700_000_000.0, kind="xid", gpu_index=0, xid=79, data=text))


@pytest.mark.asyncio
async def test_the_agent_holds_samples_for_the_send_interval_and_an_xid_does_not_wait(control_plane, make_agent):
    collector = FakeCollector("gpu-s1", gpus=2, ports=1)
    agent = make_agent(
        "gpu-s1", collector=collector, interval=HOUR, send_interval=3 * HOUR, follow_server_interval=False
    )
    node = control_plane.node("gpu-s1")

    async with running(agent):
        await wait_until(lambda: agent.transport.connected and agent.samples_taken == 1 and node.inventories)
        xid(collector, "fallen off the bus")
        await agent.tick()  # the second sample, and an XID
        await wait_until(lambda: node.stored_events == ["fallen off the bus"])
        assert node.received_seqs["telemetry"] == []  # the send loop ran for the XID and left the samples
        assert agent.buffer.last_seq("telemetry") == 0
        await wait_until(lambda: node.heartbeats and node.heartbeats[-1].buffered_samples == 2)  # held ones count
        await agent.tick()  # the third: one send interval's worth
        await wait_until(lambda: len(node.stored_samples) == 3)

    assert node.samples_per_frame == [3]
    assert node.stored_samples == collector.sampled_at


@pytest.mark.asyncio
async def test_without_a_send_interval_each_sample_goes_out_as_soon_as_it_is_taken(control_plane, make_agent):
    agent = make_agent("gpu-s2", interval=HOUR, follow_server_interval=False)
    node = control_plane.node("gpu-s2")

    async with running(agent):
        await wait_until(lambda: len(node.stored_samples) == 1)
        for taken in (2, 3):
            await agent.tick()
            await wait_until(lambda taken=taken: len(node.stored_samples) == taken)
            assert len(agent.batch) == 0

    assert node.samples_per_frame == [1, 1, 1]


@pytest.mark.asyncio
async def test_batched_telemetry_loses_nothing_and_stores_nothing_twice_across_server_crashes(
    control_plane, make_agent, tmp_path
):
    collector = FakeCollector("gpu-s3", gpus=2, ports=1)
    agent = make_agent("gpu-s3", collector=collector, send_interval=0.3, memory_frames=3, state_dir=tmp_path / "state")
    node = control_plane.node("gpu-s3")

    async with running(agent):
        for _ in range(2):  # two crashes, each long enough that the backlog spills to disk
            await wait_until(lambda: len(node.stored_samples) >= 6)
            await control_plane.stop(abrupt=True)
            produced = len(collector.sampled_at)
            await wait_until(lambda produced=produced: len(collector.sampled_at) >= produced + 12)
            await control_plane.start()
            await wait_until(lambda: len(node.stored_samples) >= len(collector.sampled_at) - 3)

    stored = node.stored_samples
    assert len(stored) == len(set(stored)), "a sample was stored twice"
    leftover = remaining_timestamps(tmp_path / "state", node.cursor["telemetry"])  # held ones spooled at stop
    assert sorted(stored + leftover) == collector.sampled_at  # exactly every sample taken, once
    assert max(node.samples_per_frame) >= 3
    assert node.connections >= 3


@pytest.mark.asyncio
async def test_samples_held_when_the_agent_stops_are_spooled_with_the_rest(control_plane, make_agent, tmp_path):
    await control_plane.stop()
    collector = FakeCollector("gpu-s4", gpus=1, ports=0)
    agent = make_agent("gpu-s4", collector=collector, send_interval=60, state_dir=tmp_path / "state")

    async with running(agent):
        await wait_until(lambda: len(collector.sampled_at) >= 5)
        assert agent.buffer.buffered_samples == 0  # all five held, none handed to the buffer yet

    assert remaining_timestamps(tmp_path / "state", 0) == collector.sampled_at


@pytest.mark.asyncio
async def test_a_simulated_fleet_sends_batched_and_accounts_for_every_sample(control_plane):
    nodes = [(f"sim-{i}", control_plane.add_node(f"sim-{i}")) for i in range(3)]
    collectors = {hostname: FakeCollector(hostname, gpus=8, ports=2) for hostname, _ in nodes}
    stop = asyncio.Event()
    fleet = asyncio.create_task(
        run_fleet(
            control_plane.url,
            nodes,
            "h100",
            1,
            stop=stop,
            interval=0.1,
            send_interval=0.3,
            collector_factory=lambda profile, hostname, seed, faults: collectors[hostname],
        )
    )
    records = [control_plane.node(hostname) for hostname, _ in nodes]
    await wait_until(lambda: all(len(record.stored_samples) >= 9 for record in records), timeout=10)
    stop.set()
    agents = await asyncio.wait_for(fleet, 10)

    for record, agent in zip(records, agents, strict=True):
        assert max(record.samples_per_frame) >= 3
        assert len(record.stored_samples) == len(set(record.stored_samples))
        # What the benchmark counts as sent (taken, less what is left unacknowledged) was all stored.
        assert agent.samples_taken - agent.buffered_samples == len(record.stored_samples)


# The setting ---------------------------------------------------------------------------------------


def write_config(tmp_path, **fields: object):
    config = tmp_path / "agent.json"
    base = {
        "server_url": "http://127.0.0.1:9",
        "server_ws_url": "ws://127.0.0.1:9/ws/agent",
        "node_id": 1,
        "hostname": "gpu-001",
        "credential": "cpn_1_x",
        "state_dir": str(tmp_path / "state"),
    }
    config.write_text(json.dumps(base | fields))
    return config


@pytest.mark.parametrize("value", [-1, 61, "soon"])
def test_a_send_interval_outside_its_bounds_in_the_config_file_is_refused_by_name(tmp_path, capsys, value):
    config = write_config(tmp_path, send_interval_s=value)

    assert main(["run", "--config", str(config)]) == EXIT_CONFIG
    error = capsys.readouterr().err
    assert f"{config} is not a valid agent configuration" in error
    assert "send_interval_s" in error


@pytest.mark.parametrize(
    ("in_config", "flags", "expected"),
    [
        ({}, [], 0.0),  # the default: each sample at once
        ({"send_interval_s": 5}, [], 5.0),
        ({"send_interval_s": 5}, ["--send-interval", "0"], 0.0),  # the flag wins, 0 included
        ({}, ["--send-interval", "2.5"], 2.5),
    ],
)
def test_run_takes_the_send_interval_from_the_flag_else_the_config(tmp_path, monkeypatch, in_config, flags, expected):
    config = write_config(tmp_path, **in_config)
    started = []
    monkeypatch.setattr("agents.cli.run_until_signalled", lambda run: started.append(run.__self__))

    assert main(["run", "--config", str(config), "--simulated", "h100", *flags]) == EXIT_OK
    (agent,) = started
    assert agent.batch.send_interval == expected


def test_simulate_gives_every_node_the_send_interval(tmp_path, monkeypatch):
    credentials = tmp_path / "fleet.json"
    node = {"hostname": "sim-0001", "node_id": 1, "credential": "cpn_1_x"}
    credentials.write_text(json.dumps({"server_ws_url": "ws://127.0.0.1:9/ws/agent", "nodes": [node]}))
    fleets = []

    async def recorded(*args: object, **options: object) -> list:
        fleets.append(options)
        return []

    monkeypatch.setattr("agents.simulator.fleet.run_fleet", recorded)
    argv = ["simulate", "--server", "http://127.0.0.1:9", "--credentials-file", str(credentials), "--nodes", "1"]

    assert main([*argv, "--send-interval", "1"]) == EXIT_OK
    assert main(argv) == EXIT_OK
    assert [fleet["send_interval"] for fleet in fleets] == [1.0, 0.0]
