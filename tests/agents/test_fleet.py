"""The fleet simulator's runtime: many real agents in one event loop, staggered, each delivering;
a node that dies drops its socket; ``cp-agent simulate`` enrolls the fleet and remembers it."""

import asyncio
import json
import sys
import threading

import pytest

from agents.cli import build_parser, main
from agents.commandline import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, EXIT_REFUSED
from agents.simulator.cli import fleet_credentials
from agents.simulator.fleet import run_fleet, start_offsets
from tests.agents.doubles import FakeCollector, FakeControlPlane, FakeEnrollmentServer, wait_until

ABNORMAL_CLOSURE = 1006


class MortalCollector(FakeCollector):
    """Dies (as the simulator's model says a node does) after ``lifetime`` samples."""

    def __init__(self, hostname: str, lifetime: int) -> None:
        super().__init__(hostname, gpus=8, ports=2)
        self.lifetime = lifetime

    @property
    def dead(self) -> bool:
        return len(self.sampled_at) >= self.lifetime


def fleet_of(control_plane: FakeControlPlane, count: int) -> list[tuple[str, str]]:
    hostnames = [f"sim-{i:04d}" for i in range(1, count + 1)]
    return [(hostname, control_plane.add_node(hostname)) for hostname in hostnames]


def fleet_running(
    control_plane: FakeControlPlane,
    nodes: list[tuple[str, str]],
    collectors: dict[str, FakeCollector],
    stop: asyncio.Event,
    *,
    interval: float,
) -> asyncio.Task:
    """``run_fleet`` of these nodes, each over its collector in ``collectors``, running as a task."""
    return asyncio.create_task(
        run_fleet(
            control_plane.url,
            nodes,
            "h100",
            1,
            stop=stop,
            interval=interval,
            collector_factory=lambda profile, hostname, seed, faults: collectors[hostname],
        )
    )


@pytest.mark.asyncio
async def test_twenty_agents_in_one_loop_all_deliver_every_sample_once(control_plane):
    nodes = fleet_of(control_plane, 20)
    collectors: dict[str, FakeCollector] = {}

    def factory(profile: str, hostname: str, seed: int, faults: str | None) -> FakeCollector:
        collectors[hostname] = FakeCollector(hostname, gpus=8, ports=2, seed=seed)
        return collectors[hostname]

    stop = asyncio.Event()
    fleet = asyncio.create_task(
        run_fleet(control_plane.url, nodes, "h100", 1, stop=stop, interval=0.1, collector_factory=factory)
    )
    records = [control_plane.node(hostname) for hostname, _ in nodes]
    await wait_until(lambda: all(len(r.stored_samples) >= 5 for r in records), timeout=10)
    stop.set()
    agents = await asyncio.wait_for(fleet, 10)

    for record, agent in zip(records, agents, strict=True):
        stored = record.stored_samples
        assert len(stored) == len(set(stored))
        assert set(stored) <= set(collectors[record.hostname].sampled_at)
        assert record.connections == 1
        assert record.close_codes == [1001]  # a clean goodbye
        assert agent.buffer.dropped_samples == 0


def test_nodes_start_spread_evenly_over_one_interval():
    assert start_offsets(4, 1.0) == [0.0, 0.25, 0.5, 0.75]
    assert start_offsets(1, 2.0) == [0.0]
    assert start_offsets(0, 1.0) == []


@pytest.mark.asyncio
async def test_a_node_waiting_for_its_start_never_starts_when_the_fleet_stops_first(control_plane):
    nodes = fleet_of(control_plane, 2)
    collectors = {hostname: FakeCollector(hostname, gpus=1, ports=0) for hostname, _ in nodes}
    stop = asyncio.Event()
    fleet = fleet_running(control_plane, nodes, collectors, stop, interval=3600)  # the second's turn: in 30 min
    await wait_until(lambda: control_plane.node("sim-0001").stored_samples)
    stop.set()
    await asyncio.wait_for(fleet, 10)

    assert collectors["sim-0002"].sampled_at == []
    assert control_plane.node("sim-0002").connections == 0


@pytest.mark.asyncio
async def test_a_node_that_dies_drops_its_socket_and_stops_while_the_rest_go_on(control_plane):
    nodes = fleet_of(control_plane, 3)
    collectors = {
        hostname: MortalCollector(hostname, lifetime=3 if hostname == "sim-0002" else 10**6) for hostname, _ in nodes
    }
    stop = asyncio.Event()
    fleet = fleet_running(control_plane, nodes, collectors, stop, interval=0.1)
    dead = control_plane.node("sim-0002")
    await wait_until(lambda: dead.close_codes)
    await wait_until(lambda: len(control_plane.node("sim-0001").stored_samples) >= 8)
    stop.set()
    agents = await asyncio.wait_for(fleet, 10)

    assert dead.close_codes == [ABNORMAL_CLOSURE]  # gone without a closing handshake
    assert len(collectors["sim-0002"].sampled_at) == 3  # and it sampled no more
    assert [agent.dead for agent in agents] == [False, True, False]


@pytest.fixture
def simulated_backend(monkeypatch):
    """A test collector stands in for the simulator's, so these tests are about the fleet runtime."""
    monkeypatch.setattr(
        "agents.simulator.fleet.simulated_collector_factory",
        lambda: lambda profile, hostname, seed, faults: FakeCollector(hostname, gpus=8, ports=2),
    )


@pytest.mark.usefixtures("simulated_backend")
def test_simulate_enrolls_the_fleet_remembers_its_credentials_and_runs_it(tmp_path):
    loop = asyncio.new_event_loop()
    control_plane = FakeControlPlane(interval_s=0.1)
    loop.run_until_complete(control_plane.start())
    server = threading.Thread(target=loop.run_forever, daemon=True)
    server.start()
    credentials = tmp_path / "fleet.json"
    try:
        with FakeEnrollmentServer(control_plane) as enrollment:
            simulate = ["simulate", "--server", enrollment.url, "--nodes", "3", "--interval", "0.1"]
            simulate += ["--credentials-file", str(credentials)]
            assert main([*simulate, "--enroll-token", "cpe_fleet", "--duration", "1"]) == EXIT_OK
            assert main([*simulate, "--duration", "0.5"]) == EXIT_OK  # the second run needs no token
            enrolled = [request["hostname"] for request in enrollment.requests]
    finally:
        asyncio.run_coroutine_threadsafe(control_plane.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        server.join(5)

    assert sorted(enrolled) == ["sim-0001", "sim-0002", "sim-0003"]
    assert all(request["simulated"] for request in enrollment.requests)
    for hostname in enrolled:
        record = control_plane.node(hostname)
        assert record.connections == 2
        assert record.stored_samples
        assert record.hellos[0].simulated


@pytest.mark.usefixtures("simulated_backend")
def test_simulate_says_how_far_it_got_when_the_token_runs_out(tmp_path, capsys):
    control_plane = FakeControlPlane()
    credentials = tmp_path / "fleet.json"
    with FakeEnrollmentServer(control_plane) as enrollment:
        uses = iter(range(2))

        def one_use_token(body: dict) -> tuple[int, object]:
            if next(uses, None) is None:
                return 410, {"detail": "This enrollment token has been used up."}
            return enrollment._enroll(body)

        enrollment.answer = one_use_token
        argv = ["simulate", "--server", enrollment.url, "--nodes", "3", "--credentials-file", str(credentials)]
        assert main([*argv, "--enroll-token", "cpe_once"]) == EXIT_REFUSED

    error = capsys.readouterr().err
    assert "This enrollment token has been used up." in error
    assert "2 of 3 nodes enrolled" in error
    assert credentials.read_text().count('"credential"') == 2  # the two that enrolled are kept


def test_simulate_without_the_simulated_backend_fails_before_spending_any_token(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "agents.simulator.collector", None)  # as if not installed
    with FakeEnrollmentServer(FakeControlPlane()) as enrollment:
        assert main(["simulate", "--server", enrollment.url, "--enroll-token", "cpe_fleet"]) == EXIT_FAILURE

    assert enrollment.requests == []
    assert "the simulated backend (agents.simulator.collector) is not available" in capsys.readouterr().err


def fleet_file(path, hostnames: list[str]) -> list[str]:
    nodes = [{"hostname": name, "node_id": i, "credential": f"cpn_{name}"} for i, name in enumerate(hostnames, 1)]
    path.write_text(json.dumps({"server_ws_url": "ws://127.0.0.1:8000/ws/agent", "nodes": nodes}))
    return ["simulate", "--server", "http://127.0.0.1:8000", "--credentials-file", str(path)]


def test_simulate_without_a_token_runs_the_first_nodes_the_credentials_file_lists(tmp_path):
    argv = fleet_file(tmp_path / "fleet.json", ["gpu-007", "gpu-001", "gpu-003"])

    credentials = fleet_credentials(build_parser().parse_args([*argv, "--nodes", "2"]))

    assert [node.hostname for node in credentials.nodes] == ["gpu-007", "gpu-001"]
    assert credentials.nodes[0].credential == "cpn_gpu-007"


def test_simulate_without_a_token_refuses_more_nodes_than_the_credentials_file_lists(tmp_path, capsys):
    argv = fleet_file(tmp_path / "fleet.json", ["gpu-001", "gpu-002"])

    assert main([*argv, "--nodes", "3"]) == EXIT_CONFIG
    assert "holds 2 node(s), fewer than the 3 asked for" in capsys.readouterr().err
