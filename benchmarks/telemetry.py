"""The issue's telemetry figures, end to end: the simulated fleet (``cp-agent simulate``, each node a
real WebSocket client) against the control plane (uvicorn) on PostgreSQL and Redis, all on 127.0.0.1.

1. Fleet sizes (``--sizes``, default 250, 500 and 1,000 below ``--nodes``): each connected on its
   own at 1 sample/s for ``--size-seconds``; the server's CPU per GPU sample stored, so its growth
   with the fleet shows.
2. The whole fleet (``--nodes``, default 2,000) at 1 sample/s. Connecting is part of the figure: from
   the fleet's start (the server is answering) until every node has a sample stored
   (``connect_all_s``, target 60 s). Once the connect's backlog is stored, ``--seconds`` of steady
   state: ingest rate, CPU, latency from a sample's timestamp on the agent (``ts`` of a ``ws/live``
   delta) to its arrival in browser WebSockets: several node-detail pages, each watching one node
   (the headline figure), and one page holding several node streams (at most one delta a second
   for everything it watches, so a sample can wait up to a second for the others' turn: reported
   apart). Then the server is restarted (SIGTERM, started again on its port): the seconds it did
   not answer, and from its answering until every node has stored a sample again
   (``reconnect_all_s``). The fleet stops; GPU samples sent (the simulator's count of samples taken
   and not left unacknowledged, x 8) against GPU samples stored, the restart included: 0 lost.
3. Saturation, searched upward: the whole fleet at 1.25x, 1.5x, 2x ... the steady rate
   (``--saturation-steps``) for ``--saturation-seconds`` each, until samples are lost, the server
   falls behind or the node pages' p99 passes 1 s. The highest rate sustained is reported.
4. ``copy_ratio`` (benchmarks/copy_ratio.py) and the agent's own cost (benchmarks/agent_cost.py).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/telemetry.py
        [--nodes 2000] [--seconds 60] [--sizes 250,500,1000] [--size-seconds 20]
        [--saturation-steps 1.25,1.5,2,2.5,3,4] [--saturation-seconds 30] [--skip-saturation]
        [--skip-restart] [--workers 2] [--fleet-processes 2] [--skip-others]

Two uvicorn processes and two simulator processes are the default: the simulator's asyncio clients
take one core per process at most, and at 2,000 nodes one process of them is near it. Every figure
is printed next to the machine's load average (the machine is shared).

The database is a scratch one (``--scratch-database``, default ``bench_telemetry``) created next to the
one ``DATABASE_URL`` names and dropped at the end; Redis is ``REDIS_URL`` (default database 10 of the
local Redis; flushed first). The last line printed is JSON.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.scratch_database import scratch_postgresql  # noqa: E402
from benchmarks.server_processes import Server, cpu_seconds  # noqa: E402
from benchmarks.telemetry_harness import (  # noqa: E402
    GPUS_PER_NODE,
    Browser,
    Fleet,
    last_json_line,
    machine_load,
    percentile,
    prepare_fleet,
    settle,
    stored_gpu_samples,
    telemetry_cursors,
    wait_until_discovered,
    wait_until_reporting,
)

WATCHED_NODES = 5
CONNECT_TIMEOUT_S = 180  # a backstop: the figure is connect_all_s, the target 60 s
DISCOVERY_TIMEOUT_S = 600  # a backstop: 2,000 first inventories took 100 s on a quiet machine
DRAIN_TIMEOUT_S = 60  # after the fleet stops, for what it sent to be stored
SETTLE_TIMEOUT_S = 120
AFTER_RESTART_S = 10  # the fleet goes on this long once every node reports again
LATENCY_LIMIT_MS = 1000
FLEET_SIZES = (250, 500, 1000)

T = TypeVar("T")


@dataclass
class Restart:
    down_s: float
    reconnect_all_s: float | None


@dataclass
class Phase:
    name: str
    nodes: int
    interval: float
    connect_all_s: float | None
    sent: int
    stored: int
    dropped: int
    window_s: float
    window_stored: int
    server_cpu_s: float
    fleet_cpu_s: float
    caught_up: bool  # the connect's backlog was stored before the window began
    discovered_s: float  # from every node reporting until every node's first inventory was applied
    latencies_ms: list[float]
    load: float
    restart: Restart | None = None

    @property
    def offered_per_s(self) -> float:
        return self.nodes * GPUS_PER_NODE / self.interval

    @property
    def rate_per_s(self) -> float:
        return self.window_stored / self.window_s

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.stored) + self.dropped * GPUS_PER_NODE

    @property
    def p99_ms(self) -> float | None:
        return percentile(self.latencies_ms, 0.99)

    @property
    def server_cpu_us_per_sample(self) -> float | None:
        return round(1e6 * self.server_cpu_s / self.window_stored, 1) if self.window_stored else None

    @property
    def sustained(self) -> bool:
        fast_enough = self.p99_ms is not None and self.p99_ms < LATENCY_LIMIT_MS
        return self.caught_up and self.lost == 0 and self.rate_per_s >= 0.97 * self.offered_per_s and fast_enough

    def summary(self) -> dict:
        return {
            "nodes": self.nodes,
            "offered_per_s": round(self.offered_per_s),
            "stored_per_s": round(self.rate_per_s),
            "lost": self.lost,
            "latency_p99_ms": self.p99_ms,
            "server_cpu_percent": round(100 * self.server_cpu_s / self.window_s),
            "server_cpu_us_per_sample": self.server_cpu_us_per_sample,
            "fleet_cpu_percent": round(100 * self.fleet_cpu_s / self.window_s),
            "connect_all_s": _rounded(self.connect_all_s),
            "inventories_applied_s": _rounded(self.discovered_s),
            "caught_up": self.caught_up,
            "load_1m": self.load,
        }


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.credentials, session = prepare_fleet(args.nodes)
        from django.db import connections

        connections.close_all()
        self.server = Server(args.workers)
        self.server.start()
        smallest = min([args.nodes, *self.sizes])
        watched = [node_id for _, node_id, _ in self.credentials[: smallest : max(1, smallest // WATCHED_NODES)]]
        self.node_pages = [Browser(self.server.port, session, [node_id]) for node_id in watched[:WATCHED_NODES]]
        self.multi_node_page = Browser(self.server.port, session, watched[:WATCHED_NODES])
        self.browsers = [*self.node_pages, self.multi_node_page]
        for page in self.browsers:
            page.start()

    @property
    def sizes(self) -> list[int]:
        return [size for size in self.args.sizes if size < self.args.nodes]

    def close(self) -> None:
        for page in self.browsers:
            page.stopping.set()
        for page in self.browsers:
            page.join(timeout=5)
        self.server.stop()

    def measure(self, phase: str | None) -> None:
        for page in self.browsers:
            page.phase = phase

    def run_phase(self, name: str, nodes: int, interval: float, seconds: float, *, restart: bool = False) -> Phase:
        """Connect ``nodes`` nodes, measure ``seconds`` of steady state (then restart the server if asked),
        stop the fleet, count what arrived."""
        credentials = self.credentials[:nodes]
        node_ids = [node_id for _, node_id, _ in credentials]
        rows_before, cursors_before = stored_gpu_samples(), telemetry_cursors()
        duration = 2 * CONNECT_TIMEOUT_S + seconds + SETTLE_TIMEOUT_S  # it is stopped before; this is a backstop
        fleet = Fleet(self.server.url, credentials, interval, self.args.fleet_processes, self.work, duration)
        try:
            connect_all_s = wait_until_reporting(node_ids, cursors_before, CONNECT_TIMEOUT_S)
            if connect_all_s is None:
                reporting = sum(telemetry_cursors().get(i, 0) > cursors_before.get(i, 0) for i in node_ids)
                raise SystemExit(f"{name}: only {reporting} of {nodes} nodes reporting after {CONNECT_TIMEOUT_S} s")
            # The steady state is measured on a settled fleet, not beside the nodes' first discoveries
            # (tens of queries each, queued on the server's inventory thread), which a fleet connected
            # for long has behind it; how long they took is reported.
            discovered_s = wait_until_discovered(node_ids, DISCOVERY_TIMEOUT_S)
            caught_up = settle(fleet, nodes, SETTLE_TIMEOUT_S)
            print(
                f"{name}: every node reporting in {connect_all_s:.1f} s, their inventories applied "
                f"{discovered_s:.1f} s later; caught up: {caught_up}; measuring (load {machine_load()})",
                flush=True,
            )
            self.measure(name)
            window_start, rows_start = time.monotonic(), stored_gpu_samples()
            cpu_start = self.server.cpu(), cpu_seconds(fleet.pids())
            time.sleep(seconds)
            window_s, rows_end = time.monotonic() - window_start, stored_gpu_samples()
            server_cpu, fleet_cpu = self.server.cpu() - cpu_start[0], cpu_seconds(fleet.pids()) - cpu_start[1]
            self.measure(None)
            load = machine_load()
            restarted = self._restart(node_ids) if restart else None
            if failure := fleet.failed():
                raise SystemExit(failure)
            taken, buffered, dropped = fleet.stop()
        except BaseException:  # a fleet left running would load the next run (or another benchmark) for minutes
            fleet.kill()
            raise
        sent = (taken - buffered) * GPUS_PER_NODE
        stored = self._drain(rows_before + sent) - rows_before
        latencies = [latency for page in self.node_pages for latency in page.latencies_ms.get(name, [])]
        phase = Phase(
            name, nodes, interval, connect_all_s, sent, stored, dropped, window_s, rows_end - rows_start,
            server_cpu, fleet_cpu, caught_up, discovered_s, latencies, load, restarted,
        )  # fmt: skip
        print(f"{name}: {json.dumps(phase.summary())}", flush=True)
        return phase

    def _restart(self, node_ids: list[int]) -> Restart:
        down_s = self.server.restart()
        since = telemetry_cursors()
        reconnect_all_s = wait_until_reporting(node_ids, since, CONNECT_TIMEOUT_S)
        time.sleep(AFTER_RESTART_S)
        return Restart(down_s, reconnect_all_s)

    def _drain(self, expected_rows: int) -> int:
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while (stored := stored_gpu_samples()) < expected_rows and time.monotonic() < deadline:
            time.sleep(2)
        return stored


def _rounded(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def numbers(kind: Callable[[str], T]) -> Callable[[str], list[T]]:
    """An argument of comma-separated values: ``250,500,1000``."""

    def parse(text: str) -> list[T]:
        return [kind(part) for part in text.split(",") if part]

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000, help="simulated nodes, 8 GPUs each (default 2000)")
    parser.add_argument("--seconds", type=float, default=60, help="steady state measured (default 60)")
    parser.add_argument("--sizes", type=numbers(int), default=list(FLEET_SIZES), help="smaller fleets, for CPU")
    parser.add_argument("--size-seconds", type=float, default=20, help="each smaller fleet measured (default 20)")
    parser.add_argument("--saturation-steps", type=numbers(float), default=[1.25, 1.5, 2, 2.5, 3, 4])
    parser.add_argument("--saturation-seconds", type=float, default=30, help="each saturation try (default 30)")
    parser.add_argument("--skip-saturation", action="store_true")
    parser.add_argument("--skip-restart", action="store_true", help="no server restart in the steady phase")
    parser.add_argument("--skip-others", action="store_true", help="no copy_ratio.py and agent_cost.py")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes (default 2)")
    parser.add_argument("--fleet-processes", type=int, default=2, help="simulator processes (default 2)")
    parser.add_argument("--agent-seconds", type=float, default=30, help="agent cost measured (default 30)")
    parser.add_argument("--scratch-database", default="bench_telemetry", help="default bench_telemetry")
    args = parser.parse_args()

    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    load_at_start = machine_load()
    with tempfile.TemporaryDirectory() as work, scratch_postgresql(args.scratch_database):
        bench = Bench(args, Path(work))
        try:
            sizes = [bench.run_phase(f"size-{size}", size, 1.0, args.size_seconds) for size in bench.sizes]
            steady = bench.run_phase("steady", args.nodes, 1.0, args.seconds, restart=not args.skip_restart)
            saturation: list[Phase] = []
            for step in [] if args.skip_saturation else args.saturation_steps:
                saturation.append(bench.run_phase(f"x{step:g}", args.nodes, 1 / step, args.saturation_seconds))
                if not saturation[-1].sustained:
                    break
            multi_page = bench.multi_node_page.latencies_ms.get("steady", [])
        finally:
            bench.close()
    others = {}
    if not args.skip_others:
        copy = last_json_line([str(REPO / "benchmarks" / "copy_ratio.py")])  # a fresh scratch database of its own
        agent = last_json_line([str(REPO / "benchmarks" / "agent_cost.py"), "--duration", str(args.agent_seconds)])
        others = {
            "copy_ratio": copy["copy_ratio"],
            "agent_cpu_percent": agent["agent_cpu_percent"],
            "agent_rss_mb": agent["agent_rss_mb"],
            "agent_collector": agent["collector"],
        }
    report(args, steady, sizes, saturation, multi_page, others, load_at_start)


def report(
    args: argparse.Namespace,
    steady: Phase,
    sizes: list[Phase],
    saturation: list[Phase],
    multi_page: list[float],
    others: dict,
    load_at_start: float,
) -> None:
    sustained = [phase.offered_per_s for phase in [steady, *saturation] if phase.sustained]
    restart = steady.restart
    figures = {
        "simulated": True,
        "nodes": args.nodes,
        "gpus": args.nodes * GPUS_PER_NODE,
        "connect_all_s": _rounded(steady.connect_all_s),
        "inventories_applied_s": _rounded(steady.discovered_s),
        "samples_per_s": round(steady.rate_per_s),
        "samples_sent": steady.sent,
        "samples_stored": steady.stored,
        "samples_lost": steady.lost,
        "latency_p50_ms": percentile(steady.latencies_ms, 0.5),
        "latency_p99_ms": steady.p99_ms,
        "latency_deltas": len(steady.latencies_ms),
        "latency_multi_node_page_p50_ms": percentile(multi_page, 0.5),
        "latency_multi_node_page_p99_ms": percentile(multi_page, 0.99),
        "restart_down_s": _rounded(restart.down_s) if restart else None,
        "reconnect_all_s": _rounded(restart.reconnect_all_s) if restart else None,
        "saturation_samples_per_s": round(max(sustained)) if sustained else None,
        "saturation_tries": [phase.summary() for phase in saturation],
        "server_cpu_us_per_sample": {str(phase.nodes): phase.server_cpu_us_per_sample for phase in [*sizes, steady]},
        "fleet_sizes": [phase.summary() for phase in sizes],
        "server_workers": args.workers,
        "fleet_processes": args.fleet_processes,
        "server_cpu_percent": round(100 * steady.server_cpu_s / steady.window_s),
        "fleet_cpu_percent": round(100 * steady.fleet_cpu_s / steady.window_s),
        "measured_s": args.seconds,
        "caught_up": steady.caught_up,
        "load_1m_at_start": load_at_start,
        "load_1m_steady": steady.load,
        "load_1m_at_end": machine_load(),
        **others,
    }
    print(f"fleet:        {args.nodes} simulated nodes x 8 GPUs, 1 sample/s, {args.seconds:g} s measured")
    print(f"              (machine load {load_at_start} at the start, {steady.load} in the steady state)")
    print(f"connect:      every node reporting {figures['connect_all_s']} s after the fleet started (target 60)")
    print(f"              every node's first inventory applied {figures['inventories_applied_s']} s after that")
    print(f"ingest:       {figures['samples_per_s']:,} GPU samples/s stored; caught up: {steady.caught_up}")
    if restart:
        print(
            f"restart:      server down {figures['restart_down_s']} s; every node reporting again "
            f"{figures['reconnect_all_s']} s after it answered (target 60)"
        )
    print(f"sent/stored:  {steady.sent:,} / {steady.stored:,} GPU samples, {steady.lost:,} lost (target 0)")
    print(f"latency:      p50 {figures['latency_p50_ms']} ms, p99 {figures['latency_p99_ms']} ms agent -> browser")
    print(f"              ({figures['latency_deltas']} deltas on {WATCHED_NODES} one-node pages; target p99 < 1000)")
    print(
        f"              one page watching {WATCHED_NODES} nodes: p50 {figures['latency_multi_node_page_p50_ms']} ms, "
        f"p99 {figures['latency_multi_node_page_p99_ms']} ms (one delta a second for all of them)"
    )
    for phase in [*sizes, steady]:
        print(
            f"server CPU:   {phase.nodes:>5} nodes: {phase.server_cpu_us_per_sample} us per GPU sample "
            f"({100 * phase.server_cpu_s / phase.window_s:.0f} % of a core; load {phase.load})"
        )
    for phase in saturation:
        verdict = "sustained" if phase.sustained else "NOT sustained"
        print(
            f"saturation:   offered {phase.offered_per_s:,.0f}/s, stored {phase.rate_per_s:,.0f}/s, "
            f"{phase.lost:,} lost, p99 {phase.p99_ms} ms, "
            f"server CPU {100 * phase.server_cpu_s / phase.window_s:.0f} %: {verdict} (load {phase.load})"
        )
    print(f"saturation:   {figures['saturation_samples_per_s']} GPU samples/s sustained (target >= 32,000)")
    if others:
        print(f"copy_ratio:   {others['copy_ratio']:.3f} (target >= 0.5)")
        print(f"agent:        {others['agent_cpu_percent']:.3f} % of a core, {others['agent_rss_mb']:.1f} MB RSS")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
