"""The nodes list at fleet scale in real Chromium (Debian's): N nodes × 8 GPUs (1,000 by default),
each with a newest sample, and every node's utilization, power and temperature changing every
second on the fleet stream (published straight to the channel layer, as the telemetry publisher
does once a second, so no simulated agents are needed).

- ``server_ms``: the server's answer for /nodes/ (request start to the last byte, Navigation Timing),
  median of ``--loads``; ``html_bytes``; ``dom_ready_ms``: navigation to DOMContentLoaded (the
  rows are in the HTML: the first useful render).
- ``snapshot_apply_ms``: main-thread time of applying the fleet snapshot to every row.
- ``update_main_thread_ms_p50/p95/max``: main-thread time of each live delta over ``--seconds``
  (every row's values change), against a 16 ms frame.
- ``sort_ms``: clicking a column header (utilization, then hostname) until the rows are laid out
  again, median of 6; ``select_all_ms``: ticking every row's checkbox at once.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/nodes_page.py
        [--nodes 1000] [--seconds 20] [--loads 5]

The database is a scratch one next to the one ``DATABASE_URL`` names, dropped at the end; Redis is
``REDIS_URL`` (default database 10, flushed first). The last line printed is JSON.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.chromium import fresh_loads, signed_in_context
from benchmarks.scratch_database import scratch_postgresql
from benchmarks.server_processes import REPO, Server
from benchmarks.telemetry_harness import GPUS_PER_NODE, percentile

SCRATCH_DATABASE = "bench_nodes_page"
FRAME_BUDGET_MS = 16.0
SORTS = 6


def build_fleet(nodes: int) -> tuple[list[int], str]:
    """N online nodes in service with 8 GPUs and a newest sample each; an operator's session."""
    from django.test import Client
    from django.utils import timezone

    from apps.accounts.models import User
    from apps.inventory.models import Gpu, Node
    from apps.telemetry.models import LatestGpuSample
    from tests import factories
    from tests.dashboard.node_data import gpu_metrics, reading

    cluster, node_type = factories.cluster("bench"), factories.node_type("bench-h100", nics=0)
    now = timezone.now()
    Node.objects.bulk_create(
        Node(hostname=f"bench-{i:04d}", cluster=cluster, node_type=node_type, lifecycle="in_service")
        for i in range(1, nodes + 1)
    )
    Node.objects.update(liveness="online", last_seen_at=now)
    ids = list(Node.objects.order_by("hostname").values_list("pk", flat=True))
    Gpu.objects.bulk_create(
        Gpu(node_id=node, index=i, uuid=factories.gpu_uuid(), model=node_type.gpu_model)
        for node in ids
        for i in range(GPUS_PER_NODE)
    )
    LatestGpuSample.objects.bulk_create(
        LatestGpuSample.of(
            node, now, [reading(gpu_metrics(i, util_gpu=random.uniform(0, 100))) for i in range(GPUS_PER_NODE)], now
        )
        for node in ids
    )
    operator = User.objects.create_user("bench-operator", role="operator")
    client = Client()
    client.force_login(operator)
    return ids, client.cookies["sessionid"].value


def publish_fleet(ids: list[int], stop: threading.Event) -> None:
    """What the telemetry publisher sends the fleet group each second when every node reported."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from agents.protocol import GpuSample
    from apps.dashboard import messages

    send = async_to_sync(get_channel_layer().group_send)
    while not stop.wait(1.0):
        ts = time.time()
        entries = []
        for node in ids:
            gpus = [
                GpuSample(index=i, util_gpu=random.uniform(0, 100), power_w=random.uniform(300, 700), temp_c=60.0)
                for i in range(GPUS_PER_NODE)
            ]
            entries.append(messages.fleet_entry(node, ts, gpus))
        send(messages.FLEET_GROUP, {"type": "telemetry.fleet", "nodes": entries})


def measure_in_chromium(origin: str, session: str, *, loads: int, seconds: float) -> dict:
    with signed_in_context(origin, session) as context:
        page_loads = fresh_loads(
            context,
            "/nodes/",
            "{server: nav.responseEnd - nav.requestStart, dom_ready: nav.domContentLoadedEventEnd, "
            "bytes: nav.transferSize, rows: document.querySelectorAll('#nodes-table tbody tr').length}",
            loads=loads,
        )
        page = context.new_page()
        page.goto("/nodes/")
        page.wait_for_function("() => window.cpNodes?.live.updateMs.length > 0", timeout=30_000)
        page.wait_for_timeout(2_000)
        start = page.evaluate("() => cpNodes.live.updateMs.length")
        page.wait_for_timeout(seconds * 1000)
        timings = page.evaluate("() => cpNodes.live.updateMs.slice()")
        snapshot = page.evaluate("() => cpNodes.live.updateMs[0]")
        sorts = [
            page.evaluate(
                """(name) => { const button = [...document.querySelectorAll('th button.sort')]
                    .find((b) => b.textContent === name);
                  const started = performance.now(); button.click(); document.body.offsetHeight;
                  return performance.now() - started; }""",
                name,
            )
            for name in ["Utilization", "Hostname"] * (SORTS // 2)
        ]
        select_all = page.evaluate(
            """() => { const box = document.getElementById('select-all'); const started = performance.now();
              box.click(); document.body.offsetHeight; return performance.now() - started; }"""
        )
    return {
        "loads": page_loads,
        "updates": timings[start:],
        "snapshot": snapshot,
        "sorts": sorts,
        "select_all": select_all,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes, 8 GPUs each (default 1000)")
    parser.add_argument("--seconds", type=float, default=20, help="live updates measured (default 20)")
    parser.add_argument("--loads", type=int, default=5, help="fresh page loads timed (default 5)")
    args = parser.parse_args()
    if args.nodes < 1 or args.seconds <= 0 or args.loads < 1:
        parser.error("--nodes, --seconds and --loads must be positive")

    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    with scratch_postgresql(SCRATCH_DATABASE):
        ids, session = build_fleet(args.nodes)
        server = Server(1)
        subprocess.run(
            [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=REPO, env=server.env, check=True
        )
        from django.db import connections

        connections.close_all()
        server.start()
        stop = threading.Event()
        publisher = threading.Thread(target=publish_fleet, args=(ids, stop), daemon=True)
        publisher.start()
        try:
            measured = measure_in_chromium(server.url, session, loads=args.loads, seconds=args.seconds)
        finally:
            stop.set()
            publisher.join(timeout=10)
            server.stop()

    loads = measured["loads"]
    p95 = percentile(measured["updates"], 0.95)
    figures = {
        "nodes": args.nodes,
        "rows_rendered": loads[0]["rows"],
        "server_ms": round(statistics.median(load["server"] for load in loads), 1),
        "dom_ready_ms": round(statistics.median(load["dom_ready"] for load in loads), 1),
        "html_bytes": round(statistics.median(load["bytes"] for load in loads)),
        "snapshot_apply_ms": round(measured["snapshot"], 1),
        "update_main_thread_ms_p50": percentile(measured["updates"], 0.5),
        "update_main_thread_ms_p95": p95,
        "update_main_thread_ms_max": round(max(measured["updates"]), 1) if measured["updates"] else None,
        "update_budget_ratio": round(p95 / FRAME_BUDGET_MS, 3) if p95 is not None else None,
        "updates": len(measured["updates"]),
        "sort_ms": round(statistics.median(measured["sorts"]), 1),
        "sort_ms_max": round(max(measured["sorts"]), 1),
        "select_all_ms": round(measured["select_all"], 1),
        "browser": "Debian chromium, headless, 1920x1080",
    }
    print(f"page:    {figures['rows_rendered']} rows; server {figures['server_ms']} ms, ", end="")
    print(f"DOM ready {figures['dom_ready_ms']} ms, {figures['html_bytes']:,} bytes")
    print(f"live:    snapshot {figures['snapshot_apply_ms']} ms; {figures['updates']} deltas, p95 {p95} ms")
    print(f"actions: sort {figures['sort_ms']} ms (max {figures['sort_ms_max']}), ", end="")
    print(f"select all {figures['select_all_ms']} ms")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
