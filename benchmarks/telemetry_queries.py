"""Chart query latency at the 1,000-node scale: GET /api/v1/nodes/{id}/telemetry for the last
15 minutes (raw samples), 24 hours (minute rollups) and 30 days (hourly rollups).

A scratch PostgreSQL database is filled, server-side (``INSERT ... SELECT`` over
``generate_series``: nothing crosses the wire), with every node's data at production density and
in production's physical order (time-major, so one node's rows are spread over as many pages as
in a live table): 16 minutes of 1-second raw samples with every field reported, 24 hours of
minute rollups, 30 days of hourly rollups, for 1,000 nodes x 8 GPUs (about 25 million rows, a
few minutes). Then random nodes are charted through the full HTTP stack (token auth included)
and p50/p99 are printed per window; target < 100 ms.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/telemetry_queries.py
        [--nodes 1000] [--requests 40] [--keep]

``--keep`` leaves the filled database (``bench_telemetry_queries``) for another run, which then
skips the fill. The last line printed is JSON.
"""

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_fleet import GPUS, h100_nodes
from benchmarks.scratch_database import scratch_postgresql

RAW_SECONDS = 16 * 60
MINUTES = 24 * 60
HOURS = 30 * 24

# Metric columns as an H100 reports them, varying with the row number ``i`` (cheap, deterministic).
RAW_METRICS = {
    "util_gpu": "(i % 101)::float8",
    "util_mem": "(i % 53)::float8",
    "mem_used_mib": "60000 + (i % 20000)",
    "temp_c": "40 + (i % 45)::float8",
    "power_w": "200 + (i % 500)::float8",
    "power_limit_w": "700.0",
    "sm_clock_mhz": "1400 + (i % 580)",
    "mem_clock_mhz": "2619",
    "throttle_reasons": "0",
    "ecc_corrected_volatile": "0",
    "ecc_uncorrected_volatile": "0",
    "ecc_corrected_aggregate": "3",
    "ecc_uncorrected_aggregate": "0",
    "retired_pages_pending": "false",
    "remapped_rows_pending": "false",
    "remapped_rows_failed": "false",
    "remapped_rows_correctable": "0",
    "remapped_rows_uncorrectable": "0",
    "pcie_replay_count": "0",
    "nvlink_crc_errors": "0",
    "nvlink_replay_errors": "0",
    "nvlink_recovery_errors": "0",
    "pcie_tx_kbps": "1000000 + i % 1000",
    "pcie_rx_kbps": "900000 + i % 1000",
    "nvlink_tx_kbps": "50000000 + i % 1000",
    "nvlink_rx_kbps": "50000000 + i % 1000",
    "recovery_action": "0",
}


def _rollup_metrics() -> dict[str, str]:
    from apps.telemetry.models import ROLLUP_METRICS

    columns = {"sample_count": "60"}
    for metric in ROLLUP_METRICS:
        columns |= {
            f"{metric}_min": f"({RAW_METRICS[metric]})::float8 * 0.8",
            f"{metric}_mean": f"({RAW_METRICS[metric]})::float8",
            f"{metric}_max": f"({RAW_METRICS[metric]})::float8 * 1.2",
        }
    return columns


# What to fill: (table, time steps, (time columns, their values for step ``s``), metric columns).
def _plan() -> list[tuple[str, int, tuple[str, str], dict[str, str]]]:
    rollups = _rollup_metrics()
    return [
        (
            "telemetry_gpusample",
            RAW_SECONDS,
            ("ts, received_at", f"now() - interval '{RAW_SECONDS} seconds' + s * interval '1 second', now()"),
            RAW_METRICS,
        ),
        (
            "telemetry_gpuminuterollup",
            MINUTES,
            ("bucket", f"date_trunc('minute', now()) - interval '{MINUTES} minutes' + s * interval '1 minute'"),
            rollups,
        ),
        (
            "telemetry_gpuhourrollup",
            HOURS,
            ("bucket", f"date_trunc('hour', now()) - interval '{HOURS} hours' + s * interval '1 hour'"),
            rollups,
        ),
    ]


def _fill(first_node: int, nodes: int, table: str, steps: int, times: tuple[str, str], metrics: dict) -> None:
    """``steps`` time steps x ``nodes`` x 8 GPUs, time-major (as a live table is), then analysed."""
    from django.db import connection, transaction

    started = time.perf_counter()
    per_step = nodes * GPUS
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} ({times[0]}, node_id, gpu_index, {", ".join(metrics)})
            SELECT {times[1]}, {first_node} + (i / {GPUS}) % {nodes}, i % {GPUS}, {", ".join(metrics.values())}
            FROM (SELECT i, i / {per_step} AS s FROM generate_series(0, {steps * per_step - 1}::bigint) AS i) AS g
            """
        )
        rows = cursor.rowcount
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {table}")
    print(f"filled {table}: {rows:,} rows in {time.perf_counter() - started:.0f} s", flush=True)


def fill(nodes: int) -> list[int]:
    from django.db import connection

    from apps.inventory.models import Node

    filled = Node.objects.filter(hostname__startswith="bench-").count()
    if filled == nodes:
        # Raw samples age out of the 15-minute window: only they are filled again.
        node_ids = list(Node.objects.filter(hostname__startswith="bench-").values_list("pk", flat=True))
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE telemetry_gpusample")
        _fill(min(node_ids), nodes, *_plan()[0])
        return node_ids
    if filled:
        sys.exit(f"The kept database holds {filled} nodes, not {nodes}: run once without --keep to refill it.")
    started = time.perf_counter()
    created = h100_nodes(nodes)
    node_ids = sorted(node.pk for node in created)
    assert node_ids[-1] == node_ids[0] + nodes - 1
    for entry in _plan():
        _fill(node_ids[0], nodes, *entry)
    print(f"fill done in {time.perf_counter() - started:.0f} s", flush=True)
    return node_ids


def measure(node_ids: list[int], requests: int) -> dict[str, dict[str, float]]:
    import random

    from django.test import Client

    from apps.accounts.models import ApiToken, User
    from apps.accounts.roles import Role

    user, _ = User.objects.get_or_create(username="bench-viewer", defaults={"role": Role.VIEWER})
    _, secret = ApiToken.issue(user=user, name=f"bench-{time.time_ns()}", role=Role.VIEWER)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    chosen = random.Random(7).sample(node_ids, min(requests, len(node_ids)))
    results = {}
    for window, metric in (("15m", "util_gpu"), ("24h", "power_w"), ("30d", "temp_c")):
        timings = []
        for i in range(requests + 3):
            node_id = chosen[i % len(chosen)]
            started = time.perf_counter()
            response = client.get(f"/api/v1/nodes/{node_id}/telemetry?window={window}&metric={metric}", secure=True)
            elapsed = (time.perf_counter() - started) * 1000
            assert response.status_code == 200, response.content[:300]
            points = sum(len(gpu["points"]) for gpu in response.json()["gpus"])
            assert points >= GPUS * 250, f"{window}: only {points} points"
            if i >= 3:  # the first requests warm up connections and code paths
                timings.append(elapsed)
        timings.sort()
        results[window] = {
            "p50_ms": round(statistics.median(timings), 1),
            "p99_ms": round(timings[min(len(timings) - 1, int(len(timings) * 0.99))], 1),
            "points": points,
        }
        print(
            f"{window:>4}  p50 {results[window]['p50_ms']:6.1f} ms   p99 {results[window]['p99_ms']:6.1f} ms",
            flush=True,
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=40, help="requests per window")
    parser.add_argument("--keep", action="store_true", help="keep the filled database for another run")
    args = parser.parse_args()
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    warnings.filterwarnings("ignore", "No directory at")  # collected static files: not needed here
    with scratch_postgresql("bench_telemetry_queries", keep=args.keep):
        node_ids = fill(args.nodes)
        results = measure(node_ids, args.requests)
    worst = max(r["p99_ms"] for r in results.values())
    print(json.dumps({"nodes": args.nodes, "gpus_per_node": GPUS, "windows": results, "worst_p99_ms": worst}))


if __name__ == "__main__":
    main()
