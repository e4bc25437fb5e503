"""The issue's telemetry figures, end to end: the simulated fleet (``cp-agent simulate``, each node a
real WebSocket client) against the control plane (uvicorn) on PostgreSQL and Redis, all on 127.0.0.1.

1. Steady state: N nodes × 8 GPUs at 1 sample/s for ``--seconds``. Ingest rate (GPU rows stored per
   second once every node is connected), GPU samples sent (the simulator's own count of node samples
   taken and not left unacknowledged, × 8) against GPU samples stored (in ``NodeGpuSample`` rows), and the
   latency from a sample's timestamp on the agent (``ts`` of a ``ws/live`` delta) to its arrival in
   browser WebSockets: several node-detail pages, each watching one node (the headline figure), and
   one page holding several node streams. A client gets at most one delta a second for everything it
   watches, so on the several-node page a sample of one node can wait up to a second for the others'
   turn: that page's figure is reported apart (``latency_multi_node_page_*``).
2. Saturation: the same fleet at 0.5 s (2x: 16,000 samples/s at 1,000 nodes) for
   ``--saturation-seconds``; if anything is lost or the server falls behind, slower rates are tried.
   The highest rate sustained with nothing lost is reported.
3. ``copy_ratio`` (benchmarks/copy_ratio.py) and the agent's own cost (benchmarks/agent_cost.py, with
   the simulated collector).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/telemetry.py
        [--nodes 1000] [--seconds 60] [--saturation-seconds 30] [--skip-saturation] [--workers 2]

Two uvicorn processes are the default: on the 2-core box, at 1,000 nodes, one process fell behind in
the steady state (its connect backlog never cleared) and stored at most ~12,300 samples/s; two
stored 8,000/s with nothing lost and ~15,500/s at saturation.

The database is a scratch one created next to the one ``DATABASE_URL`` names and dropped at the end;
Redis is ``REDIS_URL`` (default database 10 of the local Redis; flushed first). Targets: 8,000
samples/s sustained with zero lost, p99 latency under 1 s, saturation >= 16,000 samples/s, copy_ratio
>= 0.5, agent under 1 % of a core and 60 MB. The last line printed is JSON.
"""

import argparse
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/10")
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))

from benchmarks.scratch_database import scratch_postgresql  # noqa: E402

GPUS_PER_NODE = 8
WATCHED_NODES = 5
SCRATCH_DATABASE = "bench_telemetry"
CONNECT_TIMEOUT_S = 180  # for the whole fleet to connect and report
DRAIN_TIMEOUT_S = 30  # after the fleet stops, for what it sent to be stored
SETTLE_TIMEOUT_S = 120
SETTLED_BUFFERED_PER_NODE = 2
SATURATION_INTERVALS = (0.5, 0.625, 0.8)  # 2x, 1.6x, 1.25x the steady rate
SUMMARY = re.compile(
    r"fleet: (\d+) node\(s\), (\d+) connected, (\d+) dead; (\d+) samples taken, (\d+) buffered, (\d+) dropped"
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def process_tree(pid: int) -> list[int]:
    """``pid`` and its children (uvicorn --workers runs the workers as children)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    found = [pid]
    if children.exists():
        for child in children.read_text().split():
            found.extend(process_tree(int(child)))
    return found


# The control plane ---------------------------------------------------------------------------------


def scratch_database_url() -> str:
    from django.db import connection

    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{connection.settings_dict['NAME']}"))


def prepare_fleet(nodes: int, credentials_file: Path, server_url: str) -> tuple[list[int], str]:
    """N nodes with server-issued credentials (written for ``cp-agent simulate``) and a viewer's session."""
    import msgspec
    from django.test import Client

    from agents.config import FleetCredentials, SimulatedNodeCredential, websocket_url
    from agents.durable import write_private_file
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
    fleet = FleetCredentials(server_ws_url=websocket_url(server_url))
    for node in rows:
        fleet.nodes.append(SimulatedNodeCredential(node.hostname, node.pk, NodeCredential.issue(node)[1]))
    viewer = User.objects.create_user("bench-viewer", password=secrets.token_urlsafe(16), role="viewer")
    browser = Client()
    browser.force_login(viewer)
    write_private_file(credentials_file, msgspec.json.encode(fleet))
    return [node.pk for node in rows], browser.cookies["sessionid"].value


def server_environment() -> dict[str, str]:
    """The control plane's environment: the scratch database, production settings over plain HTTP."""
    env = {
        **os.environ,
        "DATABASE_URL": scratch_database_url(),
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_COOKIES": "false",
        "PYTHONPATH": str(REPO),
    }
    env.pop("TEST_DATABASE_NAME", None)
    return env


def start_server(port: int, workers: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--lifespan", "on", "--log-level", "warning", "--workers", str(workers)]
    server = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the control plane did not start") from None
            time.sleep(0.2)


def stored_rows() -> int:
    """GPU samples stored (each node row holds its GPUs' samples)."""
    from apps.telemetry.models import NodeGpuSample

    return NodeGpuSample.objects.item_count()


# The fleet -----------------------------------------------------------------------------------------


@dataclass
class FleetRun:
    process: subprocess.Popen[str]
    summaries: list[tuple[int, ...]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def follow(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip())
            if match := SUMMARY.search(line):
                self.summaries.append(tuple(int(value) for value in match.groups()))

    @property
    def connected(self) -> int:
        return self.summaries[-1][1] if self.summaries else 0


def start_fleet(server: str, credentials_file: Path, nodes: int, interval: float | None, duration: float) -> FleetRun:
    command = [sys.executable, "-m", "agents.cli", "--log-level", "info", "simulate", "--server", server]
    command += ["--credentials-file", str(credentials_file), "--nodes", str(nodes), "--profile", "h100", "--seed", "1"]
    command += ["--duration", str(duration)] + (["--interval", str(interval)] if interval else [])
    process = subprocess.Popen(
        command, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    run = FleetRun(process)
    threading.Thread(target=run.follow, daemon=True).start()
    return run


def finish(run: FleetRun) -> tuple[int, int, int]:
    """Wait for the fleet to stop by itself; its final (samples taken, buffered, dropped)."""
    if run.process.wait(timeout=120) != 0:
        raise SystemExit("the simulator failed:\n" + "\n".join(run.lines[-30:]))
    time.sleep(0.5)  # the reader thread reaches the last line
    _, _, _, taken, buffered, dropped = run.summaries[-1]
    return taken, buffered, dropped


def wait_for_drain(expected_rows: int) -> int:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while (stored := stored_rows()) < expected_rows and time.monotonic() < deadline:
        time.sleep(0.5)
    return stored


@dataclass
class Phase:
    interval: float
    nodes: int
    offered_per_s: float
    sent: int
    stored: int
    dropped: int
    buffered_at_end: int
    rate_per_s: float
    server_cpu_percent: float
    fleet_cpu_percent: float
    caught_up: bool  # the connect's backlog was stored before the window began

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.stored) + self.dropped * GPUS_PER_NODE

    @property
    def sustained(self) -> bool:
        return self.caught_up and self.lost == 0 and self.rate_per_s >= 0.97 * self.offered_per_s


def settle(run: FleetRun, nodes: int) -> bool:
    """Wait until the backlog of the fleet's connect (1,000 discoveries, replays) is stored: every node
    holds at most a couple of unacknowledged samples. False if it never gets there (the server is behind)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    seen = len(run.summaries)
    while time.monotonic() < deadline:
        if len(run.summaries) > seen and run.summaries[-1][4] <= SETTLED_BUFFERED_PER_NODE * nodes:
            return True
        time.sleep(0.5)
    return False


def run_phase(
    server_url: str,
    credentials_file: Path,
    nodes: int,
    interval: float,
    seconds: float,
    server: subprocess.Popen,
    on_window: Callable[[bool], None] | None = None,
) -> Phase:
    """Connect the fleet, measure ``seconds`` of steady state, let it stop, count what arrived."""
    rows_before = stored_rows()
    started = time.monotonic()
    duration = CONNECT_TIMEOUT_S + seconds + 30  # it is stopped after the window; this is a backstop
    run = start_fleet(server_url, credentials_file, nodes, interval if interval != 1.0 else None, duration)
    try:
        while run.connected < nodes:
            if run.process.poll() is not None or time.monotonic() - started > CONNECT_TIMEOUT_S:
                raise SystemExit(f"only {run.connected} of {nodes} nodes connected:\n" + "\n".join(run.lines[-20:]))
            time.sleep(0.5)
        caught_up = settle(run, nodes)
        if on_window is not None:
            on_window(True)
        window_start, rows_start = time.monotonic(), stored_rows()
        cpu_start = cpu_seconds(process_tree(server.pid)), cpu_seconds([run.process.pid])
        time.sleep(seconds)
        elapsed, rows_end = time.monotonic() - window_start, stored_rows()
        server_cpu = cpu_seconds(process_tree(server.pid)) - cpu_start[0]
        fleet_cpu = cpu_seconds([run.process.pid]) - cpu_start[1]
        if on_window is not None:
            on_window(False)
        run.process.send_signal(signal.SIGTERM)
        taken, buffered, dropped = finish(run)
    except BaseException:  # a fleet left running would load the next run (or another benchmark) for minutes
        run.process.kill()
        raise
    sent = (taken - buffered) * GPUS_PER_NODE
    stored = wait_for_drain(rows_before + sent) - rows_before
    return Phase(
        interval=interval,
        nodes=nodes,
        offered_per_s=nodes * GPUS_PER_NODE / interval,
        sent=sent,
        stored=stored,
        dropped=dropped,
        buffered_at_end=buffered,
        rate_per_s=(rows_end - rows_start) / elapsed,
        server_cpu_percent=100 * server_cpu / elapsed,
        fleet_cpu_percent=100 * fleet_cpu / elapsed,
        caught_up=caught_up,
    )


# The browser ---------------------------------------------------------------------------------------


class Browser(threading.Thread):
    """A viewer's page subscribed to a few node streams; the age of each delta's ``ts`` on arrival."""

    def __init__(self, port: int, session: str, node_ids: list[int]) -> None:
        super().__init__(daemon=True, name="browser")
        self.port, self.session, self.node_ids = port, session, node_ids
        self.latencies_ms: list[float] = []
        self.measuring = False
        self.stopping = threading.Event()

    def measure(self, on: bool) -> None:
        self.measuring = on

    def run(self) -> None:
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
                arrived = time.time()
                if message.get("type") != "delta" or not self.measuring:
                    continue
                for state in message.get("nodes", {}).values():
                    if "ts" in state:
                        self.latencies_ms.append(1000 * (arrived - state["ts"]))


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 1)


# The other figures ---------------------------------------------------------------------------------


def last_json_line(argv: list[str]) -> dict:
    """Run one of the other benchmarks; what its last line says."""
    output = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes, 8 GPUs each (default 1000)")
    parser.add_argument("--seconds", type=float, default=60, help="steady state measured (default 60)")
    parser.add_argument("--saturation-seconds", type=float, default=30, help="each saturation try (default 30)")
    parser.add_argument("--skip-saturation", action="store_true")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes (default 2)")
    parser.add_argument("--agent-seconds", type=float, default=30, help="agent cost measured (default 30)")
    args = parser.parse_args()

    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    figures: dict = {"simulated": True, "nodes": args.nodes, "gpus": args.nodes * GPUS_PER_NODE}
    with tempfile.TemporaryDirectory() as work, scratch_postgresql(SCRATCH_DATABASE):
        credentials_file = Path(work) / "fleet.json"
        port = free_port()
        server_url = f"http://127.0.0.1:{port}"
        node_ids, session = prepare_fleet(args.nodes, credentials_file, server_url)
        env = server_environment()
        from django.db import connections

        connections.close_all()
        server = start_server(port, args.workers, env)
        watched = node_ids[:: max(1, len(node_ids) // WATCHED_NODES)][:WATCHED_NODES]
        node_pages = [Browser(port, session, [node_id]) for node_id in watched]
        multi_node_page = Browser(port, session, watched)
        browsers = [*node_pages, multi_node_page]

        def measure(on: bool) -> None:
            for page in browsers:
                page.measure(on)

        try:
            for page in browsers:
                page.start()
            steady = run_phase(server_url, credentials_file, args.nodes, 1.0, args.seconds, server, measure)
            saturation: list[Phase] = []
            if not args.skip_saturation:
                for interval in SATURATION_INTERVALS:
                    saturation.append(
                        run_phase(server_url, credentials_file, args.nodes, interval, args.saturation_seconds, server)
                    )
                    if saturation[-1].sustained:
                        break
        finally:
            for page in browsers:
                page.stopping.set()
            for page in browsers:
                page.join(timeout=5)
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    copy = last_json_line([str(REPO / "benchmarks" / "copy_ratio.py")])  # on a fresh scratch database of its own
    agent = last_json_line([str(REPO / "benchmarks" / "agent_cost.py"), "--duration", str(args.agent_seconds)])

    sustained = [phase for phase in saturation if phase.sustained]
    node_page_latencies = [latency for page in node_pages for latency in page.latencies_ms]
    figures.update(
        samples_per_s=round(steady.rate_per_s),
        samples_sent=steady.sent,
        samples_stored=steady.stored,
        samples_lost=steady.lost,
        latency_p50_ms=percentile(node_page_latencies, 0.5),
        latency_p99_ms=percentile(node_page_latencies, 0.99),
        latency_deltas=len(node_page_latencies),
        latency_multi_node_page_p50_ms=percentile(multi_node_page.latencies_ms, 0.5),
        latency_multi_node_page_p99_ms=percentile(multi_node_page.latencies_ms, 0.99),
        saturation_samples_per_s=round(max(phase.offered_per_s for phase in sustained)) if sustained else None,
        saturation_tries=[
            {
                "offered_per_s": round(phase.offered_per_s),
                "stored_per_s": round(phase.rate_per_s),
                "lost": phase.lost,
                "server_cpu_percent": round(phase.server_cpu_percent),
            }
            for phase in saturation
        ],
        copy_ratio=copy["copy_ratio"],
        agent_cpu_percent=agent["agent_cpu_percent"],
        agent_rss_mb=agent["agent_rss_mb"],
        agent_collector=agent["collector"],
        server_workers=args.workers,
        server_cpu_percent=round(steady.server_cpu_percent),
        fleet_cpu_percent=round(steady.fleet_cpu_percent),
        measured_s=args.seconds,
        caught_up=steady.caught_up,
    )
    print(f"fleet:        {args.nodes} simulated nodes x 8 GPUs, 1 sample/s, {args.seconds:g} s measured")
    print(f"ingest:       {figures['samples_per_s']:,} GPU samples/s stored (target 8,000 at 1,000 nodes)")
    if not steady.caught_up:
        print(f"              (the fleet's connect backlog was not stored within {SETTLE_TIMEOUT_S} s: behind)")
    print(f"sent/stored:  {steady.sent:,} / {steady.stored:,} GPU samples, {steady.lost:,} lost (target 0)")
    print(f"latency:      p50 {figures['latency_p50_ms']} ms, p99 {figures['latency_p99_ms']} ms agent -> browser")
    print(f"              ({figures['latency_deltas']} deltas on {WATCHED_NODES} one-node pages; target p99 < 1000)")
    print(
        f"              one page watching {WATCHED_NODES} nodes: p50 {figures['latency_multi_node_page_p50_ms']} ms, "
        f"p99 {figures['latency_multi_node_page_p99_ms']} ms (one delta a second for all of them)"
    )
    for phase in saturation:
        verdict = "sustained" if phase.sustained else "NOT sustained"
        print(
            f"saturation:   offered {phase.offered_per_s:,.0f}/s, stored {phase.rate_per_s:,.0f}/s, "
            f"{phase.lost:,} lost, server CPU {phase.server_cpu_percent:.0f} %: {verdict}"
        )
    print(f"copy_ratio:   {copy['copy_ratio']:.3f} (target >= 0.5)")
    print(f"agent:        {agent['agent_cpu_percent']:.3f} % of a core, {agent['agent_rss_mb']:.1f} MB RSS")
    print(f"              (collector: {agent['collector']}; targets < 1 %, < 60 MB)")
    print(f"server:       {args.workers} uvicorn process(es), {steady.server_cpu_percent:.0f} % CPU in steady state")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
