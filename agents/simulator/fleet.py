"""The fleet simulator's runtime: N simulated nodes in one asyncio process, each the real agent
(its own WebSocket, buffer, heartbeats, backoff) over the simulated NVML backend.

Built for 1,000 nodes on a shared 2-core box: one event loop (uvloop when installed), no thread
per node, collectors called on the loop, one shared msgspec encoder, buffers in memory only and
capped (``buffer_frames`` per node: memory stays bounded at nodes × frames × sample size while the
control plane is away). Nodes start staggered across one interval, so their connects and their
samples are spread over the second instead of landing together.

A node dies when its model says so (its collector's ``dead`` attribute turns true): its socket is
dropped without a closing handshake, as a node that loses power drops it, and its agent stops.
"""

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Final

from agents.agent import DEFAULT_INTERVAL_S, DEFAULT_SEND_INTERVAL_S, Agent
from agents.buffer import TelemetryBuffer
from agents.collectors.base import Collector
from agents.commands.executor import CommandExecutor
from agents.commands.store import CommandStore
from agents.transport import DEFAULT_HEARTBEAT_INTERVAL_S

log = logging.getLogger(__name__)

DEFAULT_BUFFER_FRAMES: Final = 120  # two minutes per node; 1,000 nodes × 120 × ~6 KB ≈ 700 MB at worst
DEFAULT_REPORT_INTERVAL_S: Final = 10.0

CollectorFactory = Callable[[str, str, int, str | None], Collector]  # (profile, hostname, seed, faults)


class SimulatedNodeAgent(Agent):
    """An agent whose node can die: then its socket drops and it stops, as a dead node's would."""

    def __init__(self, *args: object, node_stop: asyncio.Event, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.node_stop = node_stop
        self.dead = False

    async def tick(self) -> None:
        await super().tick()
        if not self.dead and getattr(self.collector, "dead", False):
            self.dead = True
            log.warning("%s: the simulated node died; its socket is gone", self.label)
            self.transport.abort()
            self.node_stop.set()


def simulated_collector_factory() -> CollectorFactory:
    """The simulator's backend (``agents.simulator.collector``), or ImportError saying it is missing."""
    try:
        from agents.simulator.collector import SimulatedCollector
    except ImportError as exc:
        raise ImportError(f"the simulated backend (agents.simulator.collector) is not available: {exc}") from exc

    def simulated_node(profile: str, hostname: str, seed: int, faults: str | None) -> Collector:
        return SimulatedCollector(profile, hostname, seed, faults or ())

    return simulated_node


async def run_fleet(
    server_url: str,
    nodes: Sequence[tuple[str, str]],
    profile: str,
    seed: int,
    faults: str | None = None,
    *,
    stop: asyncio.Event | None = None,
    interval: float = DEFAULT_INTERVAL_S,
    send_interval: float = DEFAULT_SEND_INTERVAL_S,
    follow_server_interval: bool = True,
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL_S,
    buffer_frames: int = DEFAULT_BUFFER_FRAMES,
    collector_factory: CollectorFactory | None = None,
    report_interval: float = DEFAULT_REPORT_INTERVAL_S,
) -> list[SimulatedNodeAgent]:
    """Run one agent per ``(hostname, credential)`` until ``stop`` is set or every node has died.

    Returns the agents, stopped, for whoever wants their counters."""
    stop = stop or asyncio.Event()
    factory = collector_factory or simulated_collector_factory()
    collectors = [factory(profile, hostname, seed, faults) for hostname, _ in nodes]
    agents = [
        SimulatedNodeAgent(
            collector,
            TelemetryBuffer(None, memory_frames=buffer_frames, label=hostname),
            server_url=server_url,
            credential=credential,
            hostname=hostname,
            interval=interval,
            send_interval=send_interval,
            follow_server_interval=follow_server_interval,
            heartbeat_interval=heartbeat_interval,
            collect_in_thread=False,
            node_stop=asyncio.Event(),
            commands=simulated_commands(collector, hostname),
        )
        for collector, (hostname, credential) in zip(collectors, nodes, strict=True)
    ]
    log.info("fleet: starting %d simulated %s node(s) against %s", len(agents), profile, server_url)
    runs = [
        asyncio.create_task(_run_staggered(agent, stop, delay))
        for agent, delay in zip(agents, start_offsets(len(agents), interval), strict=True)
    ]
    reporter = asyncio.create_task(_report(agents, report_interval))
    try:
        await asyncio.gather(*runs)
    finally:
        reporter.cancel()
        for run in runs:
            run.cancel()
        await asyncio.gather(reporter, *runs, return_exceptions=True)
    _log_summary(agents)
    return agents


def simulated_commands(collector: Collector, hostname: str) -> CommandExecutor | None:
    """A simulated node runs its checks on its model, keeping its keys in memory; a node of another
    collector (a test's) runs them as processes, as a real agent would."""
    from agents.simulator.collector import SimulatedCollector
    from agents.simulator.commands import SimulatedRunner

    if not isinstance(collector, SimulatedCollector):
        return None
    return CommandExecutor(CommandStore(None), SimulatedRunner(collector), label=hostname)


def start_offsets(count: int, interval: float) -> list[float]:
    """When each of ``count`` nodes starts, in seconds after the first: evenly across one interval."""
    return [interval * index / count for index in range(count)]


async def _run_staggered(agent: SimulatedNodeAgent, fleet_stop: asyncio.Event, delay: float) -> None:
    """Start after ``delay`` (this node's slot in the interval); stop with the fleet or when the node dies."""
    fleet_stopped = asyncio.create_task(fleet_stop.wait())
    try:
        await asyncio.wait({fleet_stopped}, timeout=delay)
        if fleet_stop.is_set():
            return
        fleet_stopped.add_done_callback(lambda _: agent.node_stop.set())
        await agent.run(agent.node_stop)
    finally:
        fleet_stopped.cancel()


async def _report(agents: list[SimulatedNodeAgent], every: float) -> None:
    while True:
        await asyncio.sleep(every)
        _log_summary(agents)


def _log_summary(agents: list[SimulatedNodeAgent]) -> None:
    log.info(
        "fleet: %d node(s), %d connected, %d dead; %d samples taken, %d buffered, %d dropped",
        len(agents),
        sum(agent.transport.connected for agent in agents),
        sum(agent.dead for agent in agents),
        sum(agent.samples_taken for agent in agents),
        sum(agent.buffered_samples for agent in agents),
        sum(agent.buffer.dropped_samples for agent in agents),
    )
