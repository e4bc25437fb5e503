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
   falls behind or the node pages' p99 passes 1 s. The highest rate sustained is reported, twice:
   each sample in its own frame (``saturation_samples_per_s``, what a default agent sends), and
   with the fleet sampling that fast but sending once every ``--saturation-send-interval`` seconds
   (default 1; 0 skips it), the samples taken meanwhile in one frame
   (``saturation_batched_samples_per_s``; agents/batching.py). The latency measured is always the
   newest sample's in a frame; a batched frame's oldest sample waited ``oldest_sample_waited_ms``
   more on the agent, by design (``(samples_per_frame - 1) x interval``, reported, not measured).
4. ``copy_ratio`` (benchmarks/copy_ratio.py) and the agent's own cost (benchmarks/agent_cost.py).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/telemetry.py
        [--nodes 2000] [--seconds 60] [--sizes 250,500,1000] [--size-seconds 20]
        [--saturation-steps 1.25,1.5,2,2.5,3,4] [--saturation-seconds 30] [--skip-saturation]
        [--saturation-send-interval 1]
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
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.batching import samples_per_frame  # noqa: E402
from benchmarks.scratch_database import scratch_postgresql  # noqa: E402
from benchmarks.server_processes import Server, cpu_seconds  # noqa: E402
from benchmarks.telemetry_figures import WATCHED_NODES, Phase, Restart, report  # noqa: E402
from benchmarks.telemetry_harness import (  # noqa: E402
    GPUS_PER_NODE,
    Browser,
    Fleet,
    last_json_line,
    machine_load,
    prepare_fleet,
    settle,
    stored_gpu_samples,
    telemetry_cursors,
    wait_until_discovered,
    wait_until_reporting,
)

CONNECT_TIMEOUT_S = 180  # a backstop: the figure is connect_all_s, the target 60 s
DISCOVERY_TIMEOUT_S = 600  # a backstop: 2,000 first inventories took 100 s on a quiet machine
DRAIN_TIMEOUT_S = 60  # after the fleet stops, for what it sent to be stored
SETTLE_TIMEOUT_S = 120
AFTER_RESTART_S = 10  # the fleet goes on this long once every node reports again
FLEET_SIZES = (250, 500, 1000)

T = TypeVar("T")


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

    def run_phase(
        self,
        name: str,
        nodes: int,
        interval: float,
        seconds: float,
        *,
        restart: bool = False,
        send_interval: float = 0.0,
    ) -> Phase:
        """Connect ``nodes`` nodes, measure ``seconds`` of steady state (then restart the server if asked),
        stop the fleet, count what arrived."""
        credentials = self.credentials[:nodes]
        node_ids = [node_id for _, node_id, _ in credentials]
        rows_before, cursors_before = stored_gpu_samples(), telemetry_cursors()
        duration = 2 * CONNECT_TIMEOUT_S + seconds + SETTLE_TIMEOUT_S  # it is stopped before; this is a backstop
        per_frame = samples_per_frame(send_interval, interval)
        fleet = Fleet(
            self.server.url, credentials, interval, self.args.fleet_processes, self.work, duration,
            send_interval=send_interval,
        )  # fmt: skip
        try:
            connect_all_s = wait_until_reporting(node_ids, cursors_before, CONNECT_TIMEOUT_S)
            if connect_all_s is None:
                reporting = sum(telemetry_cursors().get(i, 0) > cursors_before.get(i, 0) for i in node_ids)
                raise SystemExit(f"{name}: only {reporting} of {nodes} nodes reporting after {CONNECT_TIMEOUT_S} s")
            # The steady state is measured on a settled fleet, not beside the nodes' first discoveries
            # (tens of queries each, queued on the server's inventory thread), which a fleet connected
            # for long has behind it; how long they took is reported.
            discovered_s = wait_until_discovered(node_ids, DISCOVERY_TIMEOUT_S)
            caught_up = settle(fleet, nodes, SETTLE_TIMEOUT_S, per_frame)
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
            server_cpu, fleet_cpu, caught_up, discovered_s, latencies, load, restarted, send_interval,
        )  # fmt: skip
        print(f"{name}: {json.dumps(phase.summary())}", flush=True)
        return phase

    def search_saturation(self, send_interval: float) -> list[Phase]:
        """The whole fleet at each ``--saturation-steps`` times the steady rate, until one is not sustained."""
        tries: list[Phase] = []
        for step in self.args.saturation_steps:
            name = f"x{step:g}" + (f" sending every {send_interval:g} s" if send_interval else "")
            seconds = self.args.saturation_seconds
            tries.append(self.run_phase(name, self.args.nodes, 1 / step, seconds, send_interval=send_interval))
            if not tries[-1].sustained:
                break
        return tries

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
    parser.add_argument(
        "--saturation-send-interval",
        type=float,
        default=1.0,
        help="a second saturation search with the fleet sending every S seconds (default 1; 0: none)",
    )
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
            saturation = [] if args.skip_saturation else bench.search_saturation(0.0)
            send_interval = 0.0 if args.skip_saturation else args.saturation_send_interval
            batched = bench.search_saturation(send_interval) if send_interval else []
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
    report(args, steady, sizes, saturation, batched, multi_page, others, load_at_start)


if __name__ == "__main__":
    main()
