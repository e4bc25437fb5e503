"""The dashboard's figures in real Chromium (Debian's), against the whole product on this machine:
the control plane (uvicorn) on PostgreSQL and Redis, and the simulated fleet (``cp-agent simulate``:
each node a real WebSocket client sending 8 GPUs' samples a second).

- ``first_render_ms``: from navigation to the fleet page's first useful render (the heatmap drawn with
  every node's data from the fleet snapshot: the page's ``fleet-first-render`` mark, which the
  browser times from navigation start), the median of ``--loads`` fresh loads; each load is listed.
  Beside it, where a load's time went: ``first_byte_ms`` (the shell's first byte), ``html_loaded_ms``
  (the shell and the snapshot after it), ``html_bytes``, and ``server_shell_ms``, what the fleet view
  itself took to build the shell (its ``Server-Timing``; the rest of the first byte is the wait for
  the server, whose loop and threads are busy with the fleet's ingest), and ``scripts_run_ms``, when
  the page's modules had run (DOMContentLoaded: fleet.js has handed its worker the snapshot; what
  follows to the first render is the worker's parse and drawing).
- ``update_main_thread_ms_p95``: the main-thread time of each live update over ``--seconds``, 95th
  percentile; the target is a 60 Hz frame, 16 ms, and ``update_budget_ratio`` is p95 / 16. The page's
  worker (apps/dashboard/static/dashboard/fleet-worker.js) parses and merges each delta and redraws
  the 8,000-cell heatmap on its OffscreenCanvas; the main thread applies what the worker sums up
  (counts, costs, the hour chart's point, and the chart's redraw every 5 s): ``performance.now()``
  around that handler. The worker's own time per update is reported beside it
  (``update_worker_ms_*``), so no work is hidden by moving it.
- ``update_bytes_per_s``: what the fleet stream sent the page per second over the same span.

Measured in the steady state: after every node has reported, the benchmark waits until the fleet's
connect backlog (1,000 discoveries and replays) is stored, as benchmarks/telemetry.py does, so that
the page loads meet the server as it runs all day, not in its first minute.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/dashboard.py
        [--nodes 1000] [--seconds 30] [--loads 9] [--workers 1] [--gateways 2]

The control plane runs as README "Running in production" lays it out: ``--workers`` uvicorn processes
of the application serve the pages and the browsers' sockets, and ``--gateways`` processes of the agent
gateway on a port of their own carry the fleet's sockets (``--gateways 0``: the workers serve both).

The scratch database and the Redis database (``REDIS_URL``, default 10, flushed first) are as in
benchmarks/telemetry.py, whose fleet and server helpers this reuses. The last line printed is JSON.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.chromium import fresh_loads, signed_in_context
from benchmarks.scratch_database import scratch_postgresql
from benchmarks.server_processes import REPO, Server
from benchmarks.telemetry_harness import (
    GPUS_PER_NODE,
    Fleet,
    machine_load,
    percentile,
    prepare_fleet,
    settle,
)

SCRATCH_DATABASE = "bench_dashboard"
FRAME_BUDGET_MS = 16.0
REPORTING_TIMEOUT_S = 240  # for every node's latest samples to be stored
SETTLE_TIMEOUT_S = 120


def reporting_nodes() -> int:
    from apps.telemetry.models import LatestGpuSample

    return LatestGpuSample.objects.count()  # a row per node


def median_of(loads: list[dict], key: str) -> float | None:
    values = [load[key] for load in loads if load[key] is not None]
    return round(statistics.median(values), 1) if values else None


def wait_for_fleet(nodes: int) -> float:
    started = time.monotonic()
    while (reporting := reporting_nodes()) < nodes:
        if time.monotonic() - started > REPORTING_TIMEOUT_S:
            raise SystemExit(f"only {reporting} of {nodes} nodes reported within {REPORTING_TIMEOUT_S} s")
        time.sleep(2)
    return time.monotonic() - started


def measure_in_chromium(origin: str, session: str, *, loads: int, seconds: float) -> dict:
    with signed_in_context(origin, session) as context:
        first_renders = fresh_loads(
            context,
            "/",
            "{render: performance.getEntriesByName('fleet-first-render')[0].startTime, "
            "first_byte: nav.responseStart, html: nav.responseEnd, bytes: nav.transferSize, "
            "scripts: nav.domContentLoadedEventStart, "
            "shell: nav.serverTiming.find((entry) => entry.name === 'shell')?.duration ?? null}",
            loads=loads,
            ready="() => window.cpFleetRendered !== undefined",
        )
        page = context.new_page()
        page.goto("/")
        page.wait_for_function("() => window.cpFleetRendered !== undefined", timeout=30_000)
        page.wait_for_timeout(3_000)  # past the snapshot, into the steady stream of deltas
        start = page.evaluate("() => ({bytes: cpFleet.live.bytesReceived, updates: cpFleet.live.updateMs.length})")
        # The two lists grow together, one entry per update, and are bounded far above 30 s of updates.
        page.wait_for_timeout(seconds * 1000)
        end = page.evaluate(
            "() => ({bytes: cpFleet.live.bytesReceived, times: cpFleet.live.updateMs.slice(), "
            "worker: cpFleet.live.workerMs.slice(), cells: "
            "cpFleet.heatmap.blocks.reduce((n, b) => n + b.gpus, 0), live: document.body.dataset.live})"
        )
    return {
        "first_renders": first_renders,
        "updates": end["times"][start["updates"] :],
        "worker": end["worker"][start["updates"] :],
        "bytes": end["bytes"] - start["bytes"],
        "cells": end["cells"],
        "live": end["live"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes, 8 GPUs each (default 1000)")
    parser.add_argument("--seconds", type=float, default=30, help="live updates measured (default 30)")
    parser.add_argument("--loads", type=int, default=9, help="fresh page loads timed (default 9)")
    parser.add_argument("--workers", type=int, default=1, help="processes serving pages (default 1)")
    parser.add_argument("--gateways", type=int, default=2, help="agent gateway processes; 0: none (default 2)")
    args = parser.parse_args()
    if args.nodes < 1 or args.seconds <= 0 or args.loads < 1 or args.workers < 1 or args.gateways < 0:
        parser.error("--nodes, --seconds, --loads and --workers must be positive, --gateways not negative")

    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    with tempfile.TemporaryDirectory() as work, scratch_postgresql(SCRATCH_DATABASE):
        credentials, session = prepare_fleet(args.nodes)
        server = Server(args.workers, args.gateways)
        subprocess.run(
            [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=REPO, env=server.env, check=True
        )
        from django.db import connections

        connections.close_all()
        server.start()
        fleet = Fleet(server.agent_url, credentials, None, 1, Path(work), REPORTING_TIMEOUT_S + args.seconds + 120)
        try:
            connect_s = wait_for_fleet(args.nodes)
            if not settle(fleet, args.nodes, SETTLE_TIMEOUT_S):
                raise SystemExit("the server never stored the fleet's connect backlog: it is behind")
            measured = measure_in_chromium(server.url, session, loads=args.loads, seconds=args.seconds)
        finally:
            fleet.kill()
            server.stop()

    p95 = percentile(measured["updates"], 0.95)
    figures = {
        "simulated": True,
        "nodes": args.nodes,
        "gpus": args.nodes * GPUS_PER_NODE,
        "heatmap_cells": measured["cells"],
        "first_render_ms": round(statistics.median(load["render"] for load in measured["first_renders"]), 1),
        "first_render_loads_ms": [round(load["render"], 1) for load in measured["first_renders"]],
        # Where a load's time went: the server's answer began (first byte), the HTML was in, then scripts.
        "first_byte_ms": round(statistics.median(load["first_byte"] for load in measured["first_renders"]), 1),
        "html_loaded_ms": round(statistics.median(load["html"] for load in measured["first_renders"]), 1),
        "html_bytes": round(statistics.median(load["bytes"] for load in measured["first_renders"])),
        # Of the first byte, what the page's view took (its Server-Timing): the rest is the wait for
        # the server (its loop and threads busy with the fleet's ingest) and the connection.
        "server_shell_ms": median_of(measured["first_renders"], "shell"),
        # The page's modules have run (fleet.js handed the worker the snapshot); then the worker's draw.
        "scripts_run_ms": median_of(measured["first_renders"], "scripts"),
        "server_shell_loads_ms": [load["shell"] for load in measured["first_renders"]],
        "update_main_thread_ms_p50": percentile(measured["updates"], 0.5),
        "update_main_thread_ms_p95": p95,
        "update_main_thread_ms_max": round(max(measured["updates"]), 2) if measured["updates"] else None,
        "update_budget_ratio": round(p95 / FRAME_BUDGET_MS, 3) if p95 is not None else None,
        "update_worker_ms_p50": percentile(measured["worker"], 0.5),
        "update_worker_ms_p95": percentile(measured["worker"], 0.95),
        "updates": len(measured["updates"]),
        "update_bytes_per_s": round(measured["bytes"] / args.seconds),
        "measured_s": args.seconds,
        "fleet_connect_s": round(connect_s, 1),
        "page_status_at_end": measured["live"],
        "server_workers": args.workers,
        "agent_gateways": args.gateways,
        "browser": "Debian chromium, headless, 1920x1080",
        "load_1m": machine_load(),
    }
    print(f"fleet:        {args.nodes} simulated nodes x 8 GPUs at 1 sample/s ({figures['heatmap_cells']} cells drawn)")
    print(f"first render: {figures['first_render_ms']} ms median of {args.loads} loads (target < 1000)")
    print(f"              loads: {figures['first_render_loads_ms']}")
    print(
        f"              (median first byte {figures['first_byte_ms']} ms, HTML in at {figures['html_loaded_ms']} ms, "
        f"{figures['html_bytes']:,} bytes; the view's own time {figures['server_shell_ms']} ms; "
        f"scripts run at {figures['scripts_run_ms']} ms)"
    )
    print(
        f"updates:      {figures['updates']} in {args.seconds:g} s; main thread p50 "
        f"{figures['update_main_thread_ms_p50']} ms, p95 {p95} ms (target < {FRAME_BUDGET_MS:g}), "
        f"max {figures['update_main_thread_ms_max']} ms"
    )
    print(
        f"              in the page's worker (parse, merge, heatmap): p50 {figures['update_worker_ms_p50']} ms, "
        f"p95 {figures['update_worker_ms_p95']} ms"
    )
    print(f"payload:      {figures['update_bytes_per_s']:,} bytes/s from the fleet stream")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
