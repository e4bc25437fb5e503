"""The agent over a real WebSocket: handshake, replay without loss or duplicates across server
crashes, Welcome's seqs, backoff and its reset, refused credentials, Error replies, discovery."""

import asyncio
import logging
from contextlib import asynccontextmanager

import pytest
from websockets.asyncio.server import serve

from agents.agent import Agent
from agents.buffer import TelemetryBuffer
from agents.protocol import Inventory
from agents.transport import Backoff, Transport
from tests.agents.doubles import FakeCollector, wait_until


@asynccontextmanager
async def running(agent: Agent):
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


def remaining_timestamps(state_dir, stored_up_to: int) -> list[float]:
    """What a stopped agent still holds in its spool, past what the server stores."""
    from agents.protocol import decode_agent_message

    buffer = TelemetryBuffer(state_dir)
    buffer.welcome("telemetry", stored_up_to)
    return [s.ts for f in buffer.pending("telemetry") for s in decode_agent_message(f.data).samples]


@pytest.mark.asyncio
async def test_it_says_hello_reports_inventory_and_streams_acknowledged_telemetry(control_plane, make_agent):
    collector = FakeCollector("gpu-a1", gpus=2, ports=1)
    agent = make_agent("gpu-a1", collector=collector)

    async with running(agent):
        await wait_until(lambda: len(control_plane.node("gpu-a1").stored_samples) >= 5)
        await wait_until(lambda: control_plane.node("gpu-a1").heartbeats)

    node = control_plane.node("gpu-a1")
    hello = node.hellos[0]
    assert (hello.hostname, hello.simulated, hello.protocol) == ("gpu-a1", True, 1)
    assert isinstance(node.inventories[0], Inventory)
    assert node.inventories[0].host.hostname == "gpu-a1"
    # Frames sampled before the connection opened go out packed under the last one's seq, so the
    # first seq depends on how long connecting took; what must hold is order and completeness.
    seqs = node.received_seqs["telemetry"]
    assert seqs == sorted(set(seqs))
    assert node.stored_samples == collector.sampled_at[: len(node.stored_samples)]
    assert agent.buffer.buffered_samples == 0  # everything acknowledged


@pytest.mark.asyncio
async def test_server_crashes_lose_no_sample_and_store_none_twice(control_plane, make_agent, tmp_path):
    collector = FakeCollector("gpu-a2", gpus=2, ports=1)
    agent = make_agent("gpu-a2", collector=collector, memory_frames=3, state_dir=tmp_path / "state")
    node = control_plane.node("gpu-a2")

    async with running(agent):
        for _ in range(2):  # two crashes, each long enough that the backlog spills to disk
            await wait_until(lambda: len(node.stored_samples) >= 3)
            await control_plane.stop(abrupt=True)
            produced = len(collector.sampled_at)
            await wait_until(lambda produced=produced: len(collector.sampled_at) >= produced + 8)
            await control_plane.start()
            await wait_until(lambda: len(node.stored_samples) >= len(collector.sampled_at) - 1)

    stored = node.stored_samples
    assert len(stored) == len(set(stored)), "a sample was stored twice"
    assert stored == sorted(stored)
    leftover = remaining_timestamps(tmp_path / "state", node.cursor["telemetry"])
    assert set(stored).isdisjoint(leftover)
    assert sorted(stored + leftover) == collector.sampled_at  # exactly every sample taken, once
    assert max(node.samples_per_frame) > 1  # the backlog went out packed
    assert node.connections >= 3
    assert max(h.buffered_samples for h in node.hellos) >= 8  # the reconnect said how much it brought


@pytest.mark.asyncio
async def test_welcome_drops_frames_the_server_already_stores(control_plane, make_agent, tmp_path):
    # The agent sent frames 1-6 live, the server stored them, the acks were lost, the agent restarted.
    state = tmp_path / "state"
    buffer = TelemetryBuffer(state)
    collector = FakeCollector("gpu-a3", gpus=1, ports=0)
    for i in range(10):
        seq = buffer.add("telemetry", [_encoded(collector, i)])
        if seq <= 6:
            buffer.next_frame("telemetry", seq - 1)
    buffer.close()
    credential = control_plane.add_node("gpu-a3")
    node = control_plane.node("gpu-a3")
    node.cursor["telemetry"] = 6
    node.stored_samples.extend(collector.sampled_at[:6])
    agent = make_agent("gpu-a3", credential=credential, state_dir=state, collector=FakeCollector("gpu-a3", limit=0))

    async with running(agent):
        await wait_until(lambda: len(node.stored_samples) >= 10)
        await asyncio.sleep(0.2)

    assert min(node.received_seqs["telemetry"]) > 6
    assert node.stored_samples == collector.sampled_at


def _encoded(collector: FakeCollector, i: int) -> bytes:
    from agents.protocol import encode

    return encode(collector.sample(1_700_000_000.0 + i))


def test_backoff_grows_exponentially_with_full_jitter_up_to_the_cap_and_resets():
    draws = iter([1.0] * 8 + [0.25, 0.0])
    backoff = Backoff(base=1.0, cap=60.0, rand=lambda: next(draws))

    assert [backoff.next_delay() for _ in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff.next_delay() == 15.0  # a quarter of the capped ceiling
    backoff.reset()
    assert backoff.next_delay() == 0.0  # full jitter: anywhere from zero


@pytest.mark.asyncio
async def test_reconnects_back_off_with_jitter_and_reset_after_a_stable_connection(control_plane, make_agent):
    agent = make_agent("gpu-a4")
    await control_plane.stop()
    delays: list[float] = []

    async def sleep(delay: float, stop: asyncio.Event) -> None:
        delays.append(delay)
        if len(delays) == 4:
            await control_plane.start()  # the server comes back during the fourth wait
        if len(delays) == 5:
            stop.set()
        await asyncio.sleep(0)

    agent.transport = Transport(
        control_plane.url,
        agent.transport.credential,
        agent,
        heartbeat_interval=0.1,
        backoff=Backoff(base=1.0, cap=5.0, rand=lambda: 0.5),
        sleep=sleep,
        stable_after_s=0.0,
    )
    async with running(agent):
        await wait_until(lambda: agent.transport.connected)
        await control_plane.stop(abrupt=True)
        await wait_until(lambda: len(delays) == 5)

    assert delays == [0.5, 1.0, 2.0, 2.5, 0.5]  # 1, 2, 4, then the 5 s cap, halved by the draw; reset after


@pytest.mark.asyncio
@pytest.mark.parametrize("when", ["at connect", "once connected"])
async def test_a_refused_credential_backs_off_to_the_cap_and_says_so_loudly(control_plane, make_agent, caplog, when):
    credential = control_plane.add_node("gpu-a5") if when == "once connected" else "cpn_9_revoked"
    agent = make_agent("gpu-a5", credential=credential)
    delays: list[float] = []

    async def sleep(delay: float, stop: asyncio.Event) -> None:
        delays.append(delay)
        stop.set()

    agent.transport = Transport(
        control_plane.url, credential, agent, backoff=Backoff(base=1.0, cap=60.0, rand=lambda: 0.0), sleep=sleep
    )
    with caplog.at_level(logging.ERROR):
        async with running(agent) as stop:
            if when == "once connected":
                await wait_until(lambda: agent.transport.connected)
                await control_plane.revoke(credential)
            await stop.wait()

    assert delays == [30.0]  # the cap, jittered only within its upper half
    assert "refused this node's credential" in caplog.text
    assert "cp-agent enroll" in caplog.text


@pytest.mark.asyncio
async def test_an_http_401_at_the_handshake_counts_as_a_refused_credential(make_agent, caplog):
    async with serve(
        lambda ws: None, "127.0.0.1", 0, process_request=lambda c, r: c.respond(401, "credential revoked")
    ) as server:
        port = server.sockets[0].getsockname()[1]
        agent = make_agent("gpu-a6")
        delays: list[float] = []

        async def sleep(delay: float, stop: asyncio.Event) -> None:
            delays.append(delay)
            stop.set()

        agent.transport = Transport(
            f"ws://127.0.0.1:{port}/ws/agent",
            "cpn_1_x",
            agent,
            backoff=Backoff(cap=60.0, rand=lambda: 1.0),
            sleep=sleep,
        )
        with caplog.at_level(logging.ERROR):
            async with running(agent) as stop:
                await stop.wait()

    assert delays == [60.0]
    assert "HTTP 401" in caplog.text


@pytest.mark.asyncio
@pytest.mark.parametrize("server_names_the_stream", [True, False])
async def test_a_frame_refused_for_good_is_dropped_and_never_resent(
    control_plane, make_agent, caplog, server_names_the_stream
):
    control_plane.send_error_stream = server_names_the_stream
    control_plane.refuse[("telemetry", 3)] = "invalid"
    collector = FakeCollector("gpu-a7", gpus=1, ports=0)
    agent = make_agent("gpu-a7", collector=collector)
    node = control_plane.node("gpu-a7")

    with caplog.at_level(logging.ERROR):
        async with running(agent):
            await wait_until(lambda: len(node.stored_samples) >= 6)

    assert node.received_seqs["telemetry"].count(3) == 1
    assert collector.sampled_at[2] not in node.stored_samples
    assert agent.buffer.dropped_samples == 1
    assert "refused telemetry seq 3 for good (invalid" in caplog.text


@pytest.mark.asyncio
async def test_a_frame_refused_for_now_stays_buffered_and_goes_out_after_the_next_welcome(
    control_plane, make_agent, caplog
):
    control_plane.refuse[("telemetry", 3)] = "not_ready"
    collector = FakeCollector("gpu-a8", gpus=1, ports=0, limit=3)
    agent = make_agent("gpu-a8", collector=collector)
    node = control_plane.node("gpu-a8")

    with caplog.at_level(logging.WARNING):
        async with running(agent):
            await wait_until(lambda: 3 in node.received_seqs["telemetry"])
            await asyncio.sleep(0.2)
            assert agent.buffer.buffered_samples == 1
            await control_plane.stop(abrupt=True)
            await control_plane.start()
            await wait_until(lambda: len(node.stored_samples) == 3)

    assert node.stored_samples == collector.sampled_at
    assert agent.buffer.dropped_samples == 0
    assert "stays buffered" in caplog.text


@pytest.mark.asyncio
async def test_no_more_than_the_in_flight_window_goes_out_unacknowledged(control_plane, make_agent):
    control_plane.acknowledging = False
    agent = make_agent("gpu-a15")
    agent.transport = Transport(control_plane.url, agent.transport.credential, agent, max_in_flight=3)
    node = control_plane.node("gpu-a15")

    async with running(agent):
        await wait_until(lambda: agent.samples_taken >= 8)
        assert node.received_seqs["telemetry"] == [1, 2, 3]
        control_plane.acknowledging = True
        await control_plane.stop(abrupt=True)  # the next connection's Welcome tells what is stored
        await control_plane.start()
        await wait_until(lambda: len(node.stored_samples) >= 8)

    assert node.stored_samples == sorted(set(node.stored_samples))


@pytest.mark.asyncio
async def test_an_ack_that_reopens_a_full_window_sends_what_waited_without_a_new_sample(control_plane, make_agent):
    control_plane.acknowledging = False
    agent = make_agent("gpu-a16", interval=3600, follow_server_interval=False)  # one sample, then none by itself
    agent.transport = Transport(control_plane.url, agent.transport.credential, agent, max_in_flight=1)
    node = control_plane.node("gpu-a16")

    async with running(agent):
        await wait_until(lambda: len(node.received_seqs["telemetry"]) == 1)
        await agent.tick()
        await agent.tick()
        await asyncio.sleep(0.2)
        assert len(node.received_seqs["telemetry"]) == 1  # the window is full
        await control_plane.acknowledge("gpu-a16")
        await wait_until(lambda: len(node.received_seqs["telemetry"]) == 2)

    assert node.samples_per_frame == [1, 2]  # the two that waited, packed


@pytest.mark.asyncio
async def test_discovery_is_sent_on_every_connect_and_whenever_it_changes(control_plane, make_agent):
    collector = FakeCollector("gpu-a9", gpus=2, ports=1)
    agent = make_agent("gpu-a9", collector=collector)
    node = control_plane.node("gpu-a9")

    async with running(agent):
        await wait_until(lambda: len(node.inventories) == 1)
        collector.extra_gpu_name = "NVIDIA H200"  # e.g. a GPU swapped
        await wait_until(lambda: len(node.inventories) == 2)
        await asyncio.sleep(0.3)
        assert len(node.inventories) == 2  # unchanged discovery is not resent
        await control_plane.stop(abrupt=True)
        await control_plane.start()
        await wait_until(lambda: len(node.inventories) == 3)

    assert node.inventories[1].gpus[0].name == "NVIDIA H200"
    assert collector.discoveries >= 3


@pytest.mark.asyncio
async def test_it_keeps_sampling_while_disconnected_and_flushes_the_buffer_on_stop(control_plane, make_agent, tmp_path):
    await control_plane.stop()
    collector = FakeCollector("gpu-a10", gpus=1, ports=0)
    agent = make_agent("gpu-a10", collector=collector, state_dir=tmp_path / "state", memory_frames=100)

    async with running(agent):
        await wait_until(lambda: len(collector.sampled_at) >= 5)

    assert collector.closed
    assert remaining_timestamps(tmp_path / "state", 0) == collector.sampled_at


@pytest.mark.asyncio
async def test_a_collector_failure_is_logged_and_sampling_goes_on(control_plane, make_agent, caplog):
    collector = FakeCollector("gpu-a11", gpus=1, ports=0, limit=2)
    agent = make_agent("gpu-a11", collector=collector)

    with caplog.at_level(logging.ERROR):
        async with running(agent):
            await wait_until(lambda: agent.samples_taken >= 5)

    assert "sample() failed" in caplog.text
    assert "the GPUs stopped answering" in caplog.text


@pytest.mark.asyncio
async def test_a_sample_the_protocol_refuses_is_dropped_on_the_agent_not_sent(control_plane, make_agent, caplog):
    collector = FakeCollector("gpu-a12", gpus=1, ports=0)
    original = collector.sample

    def hot(now: float):
        sample = original(now)
        sample.gpus[0].temp_c = 900.0  # out of the protocol's range
        return sample

    collector.sample = hot
    agent = make_agent("gpu-a12", collector=collector)

    with caplog.at_level(logging.ERROR):
        async with running(agent):
            await wait_until(lambda: agent.samples_taken >= 3)

    assert control_plane.node("gpu-a12").received_seqs["telemetry"] == []
    assert "temp_c" in caplog.text


@pytest.mark.asyncio
async def test_the_server_interval_from_welcome_is_adopted(control_plane, make_agent):
    control_plane.interval_s = 0.25
    agent = make_agent("gpu-a13", interval=1.0)

    async with running(agent):
        await wait_until(lambda: agent.transport.connected)

    assert agent.interval == 0.25


@pytest.mark.asyncio
async def test_an_agent_cancelled_from_outside_ends_promptly_and_still_flushes(control_plane, make_agent, tmp_path):
    collector = FakeCollector("gpu-a16", gpus=1, ports=0)
    agent = make_agent("gpu-a16", collector=collector, state_dir=tmp_path / "state")
    task = asyncio.create_task(agent.run(asyncio.Event()))
    await wait_until(lambda: agent.transport.connected)

    task.cancel()
    await asyncio.wait({task}, timeout=2)

    assert task.done()
    assert collector.closed
