"""The parts of benchmarks/telemetry.py that are not figures: the simulated fleet (``cp-agent simulate``
in one or more processes, each with its slice of the nodes' credentials), browsers on ``ws/live`` that
note each delta's age, and what the database says was stored and who is reporting. The control plane
they talk to is benchmarks/server_processes.py."""

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.server_processes import REPO

GPUS_PER_NODE = 8
# An agent's lost connection, as agents/transport.py logs it: why, in its own words (a close code).
CONNECTION_LOST = re.compile(r": (?:cannot talk to \S+ \((.*)\); retrying|connection to \S+ closed; reconnecting)")
SUMMARY = re.compile(
    r"fleet: (\d+) node\(s\), (\d+) connected, (\d+) dead; (\d+) samples taken, (\d+) buffered, (\d+) dropped"
)
SETTLED_FRAMES_PER_NODE = 2  # a node's frame in flight, and the samples it holds for the next one


def machine_load() -> float:
    """The one-minute load average: every figure is reported next to it (the machine is shared)."""
    return round(os.getloadavg()[0], 1)


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 1)


def last_json_line(argv: list[str]) -> dict:
    """Run one of the other benchmarks; what its last line says."""
    output = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


# The database --------------------------------------------------------------------------------------


def prepare_fleet(nodes: int) -> tuple[list[tuple[str, int, str]], str]:
    """N nodes with server-issued credentials and a viewer's session: ((hostname, node id, credential)
    in order, session cookie)."""
    from django.test import Client

    from apps.accounts.models import User
    from apps.gateway.models import NodeCredential
    from apps.inventory.models import Gpu, Node
    from tests import factories

    cluster, node_type = factories.cluster("bench"), factories.node_type("bench-h100")
    Node.objects.bulk_create(
        Node(hostname=f"bench-{number:04d}", cluster=cluster, node_type=node_type) for number in range(1, nodes + 1)
    )
    rows = list(Node.objects.filter(cluster=cluster).order_by("hostname"))
    Gpu.objects.bulk_create(
        Gpu(node=node, index=index, uuid=factories.gpu_uuid(), model=node_type.gpu_model)
        for node in rows
        for index in range(GPUS_PER_NODE)
    )
    credentials = [(node.hostname, node.pk, NodeCredential.issue(node)[1]) for node in rows]
    viewer = User.objects.create_user("bench-viewer", password=secrets.token_urlsafe(16), role="viewer")
    browser = Client()
    browser.force_login(viewer)
    return credentials, browser.cookies["sessionid"].value


def stored_gpu_samples() -> int:
    """GPU samples stored so far (each node row holds its GPUs' samples; the one place that knows it)."""
    from apps.telemetry.models import NodeGpuSample

    return NodeGpuSample.objects.item_count()


def telemetry_cursors() -> dict[int, int]:
    """Each node's highest telemetry seq stored."""
    from apps.telemetry.cursors import stored_seqs

    return {node_id: telemetry_seq for node_id, (telemetry_seq, _) in stored_seqs().items()}


def wait_until_reporting(node_ids: list[int], since: dict[int, int], timeout_s: float) -> float | None:
    """Seconds until every node stored a sample past its cursor in ``since``; None if not within ``timeout_s``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        cursors = telemetry_cursors()
        if all(cursors.get(node_id, 0) > since.get(node_id, 0) for node_id in node_ids):
            return time.monotonic() - started
        time.sleep(0.5)
    return None


# The fleet -----------------------------------------------------------------------------------------


@dataclass
class SimulatorProcess:
    process: subprocess.Popen[str]
    summaries: list[tuple[int, ...]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    connections_lost: Counter[str] = field(default_factory=Counter)  # by reason

    def follow(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip())
            del self.lines[:-50]
            if lost := CONNECTION_LOST.search(line):
                self.connections_lost[lost.group(1) or "closed"] += 1
            if match := SUMMARY.search(line):
                self.summaries.append(tuple(int(value) for value in match.groups()))


class Fleet:
    """``len(credentials)`` simulated nodes over ``processes`` simulator processes (one process of
    asyncio clients is one core at most: at 2,000 nodes and more than a sample a second it is the limit)."""

    def __init__(
        self,
        server_url: str,
        credentials: list[tuple[str, int, str]],
        interval: float | None,
        processes: int,
        work: Path,
        duration_s: float,
        faults: str | None = None,
        send_interval: float = 0.0,
    ) -> None:
        import msgspec

        from agents.config import FleetCredentials, SimulatedNodeCredential, websocket_url
        from agents.durable import write_private_file

        self.simulators: list[SimulatorProcess] = []
        slices = [credentials[index::processes] for index in range(processes)]
        for number, part in enumerate(slice_ for slice_ in slices if slice_):
            fleet = FleetCredentials(server_ws_url=websocket_url(server_url))
            fleet.nodes = [SimulatedNodeCredential(*node) for node in part]
            path = work / f"fleet-{number}.json"
            write_private_file(path, msgspec.json.encode(fleet))
            command = [sys.executable, "-m", "agents.cli", "--log-level", "info", "simulate", "--server", server_url]
            command += ["--credentials-file", str(path), "--nodes", str(len(part)), "--profile", "h100"]
            command += ["--seed", str(number + 1), "--duration", str(duration_s)]
            command += ["--interval", str(interval)] if interval else []
            command += ["--send-interval", str(send_interval)] if send_interval else []
            command += ["--faults", faults] if faults else []  # each process applies those of its nodes
            process = subprocess.Popen(
                command, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            simulator = SimulatorProcess(process)
            threading.Thread(target=simulator.follow, daemon=True).start()
            self.simulators.append(simulator)

    def pids(self) -> list[int]:
        return [simulator.process.pid for simulator in self.simulators]

    def buffered(self) -> int | None:
        """Samples the fleet holds unacknowledged, as of each simulator's last summary (None before one)."""
        if any(not simulator.summaries for simulator in self.simulators):
            return None
        return sum(simulator.summaries[-1][4] for simulator in self.simulators)

    def summaries_seen(self) -> int:
        return sum(len(simulator.summaries) for simulator in self.simulators)

    def failed(self) -> str | None:
        for simulator in self.simulators:
            if simulator.process.poll() is not None:
                return "a simulator stopped early:\n" + "\n".join(simulator.lines[-20:])
        return None

    def stop(self) -> tuple[int, int, int]:
        """Stop the fleet; its final (samples taken, buffered, dropped), summed."""
        for simulator in self.simulators:
            simulator.process.send_signal(signal.SIGTERM)
        totals = [0, 0, 0]
        for simulator in self.simulators:
            if simulator.process.wait(timeout=120) != 0:
                raise SystemExit("the simulator failed:\n" + "\n".join(simulator.lines[-30:]))
        time.sleep(0.5)  # the reader threads reach the last lines
        for simulator in self.simulators:
            for index, value in enumerate(simulator.summaries[-1][3:]):
                totals[index] += value
        return totals[0], totals[1], totals[2]

    def kill(self) -> None:
        for simulator in self.simulators:
            simulator.process.kill()


def settle(fleet: Fleet, nodes: int, timeout_s: float, samples_per_frame: int = 1) -> bool:
    """Wait until the backlog of the fleet's connect (discoveries, replays) is stored: every node holds
    at most a couple of frames' worth of unacknowledged samples, as of simulator summaries newer than
    the call. False if it never gets there (the server is behind)."""
    deadline = time.monotonic() + timeout_s
    seen = fleet.summaries_seen()
    while time.monotonic() < deadline:
        buffered = fleet.buffered()
        fresh = fleet.summaries_seen() >= seen + len(fleet.simulators)
        if fresh and buffered is not None and buffered <= SETTLED_FRAMES_PER_NODE * samples_per_frame * nodes:
            return True
        time.sleep(0.5)
    return False


# The browser ---------------------------------------------------------------------------------------


class Browser(threading.Thread):
    """A viewer's page subscribed to a few node streams; the age of each delta's ``ts`` on arrival, by
    the phase it arrived in (``phase`` None: not measuring). It reconnects when the server restarts."""

    def __init__(self, port: int, session: str, node_ids: list[int]) -> None:
        super().__init__(daemon=True, name="browser")
        self.port, self.session, self.node_ids = port, session, node_ids
        self.latencies_ms: dict[str, list[float]] = {}
        self.phase: str | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        from websockets.exceptions import WebSocketException

        while not self.stopping.is_set():
            try:
                self._watch()
            except (OSError, WebSocketException):  # the server is restarting: connect again
                self.stopping.wait(0.5)

    def _watch(self) -> None:
        from websockets.sync.client import connect

        url, origin = f"ws://127.0.0.1:{self.port}/ws/live", f"http://127.0.0.1:{self.port}"
        with connect(url, origin=origin, additional_headers={"Cookie": f"sessionid={self.session}"}) as page:
            for node_id in self.node_ids:
                page.send(json.dumps({"subscribe": "node", "node": node_id}))
            while not self.stopping.is_set():
                try:
                    message = json.loads(page.recv(timeout=1))
                except TimeoutError:
                    continue
                arrived, phase = time.time(), self.phase
                if message.get("type") != "delta" or phase is None:
                    continue
                for state in message.get("nodes", {}).values():
                    if "ts" in state:
                        self.latencies_ms.setdefault(phase, []).append(1000 * (arrived - state["ts"]))


def wait_until_connected(node_ids: list[int], timeout_s: float) -> float:
    """Seconds until every one of the nodes' agents said Hello (its channel recorded)."""
    from apps.gateway.models import NodeAgent

    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if NodeAgent.objects.filter(node_id__in=node_ids).exclude(channel_name="").count() == len(node_ids):
            return time.monotonic() - started
        time.sleep(0.25)
    raise SystemExit(f"not every agent connected within {timeout_s:g} s")


def wait_until_discovered(node_ids: list[int], timeout_s: float) -> float:
    """Seconds until every node's first inventory is applied: what is measured on the fleet starts on a
    settled fleet, not beside a thousand first discoveries (tens of queries each, on the server's
    inventory thread), which a fleet connected for long has behind it."""
    from apps.gateway.models import NodeAgent

    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if NodeAgent.objects.filter(node_id__in=node_ids, inventory_at__isnull=False).count() == len(node_ids):
            return time.monotonic() - started
        time.sleep(0.5)
    raise SystemExit(f"not every agent's inventory was applied within {timeout_s:g} s")


def stop_gently(fleet: Fleet) -> None:
    """SIGTERM the simulators and wait, so the agents close their sockets before the server stops."""
    for simulator in fleet.simulators:
        simulator.process.terminate()
    for simulator in fleet.simulators:
        try:
            simulator.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            simulator.process.kill()
