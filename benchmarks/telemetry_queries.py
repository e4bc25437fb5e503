"""Chart query latency at the 1,000-node scale: GET /api/v1/nodes/{id}/telemetry for the last
15 minutes (raw samples), 24 hours (minute rollups) and 30 days (hourly rollups), on the compact
layout (docs/telemetry-storage.md).

A scratch PostgreSQL database is filled server-side (``INSERT ... SELECT`` over ``generate_series``)
with every node's rows at production density and in production's physical order (time-major, so one
node's rows are spread over as many pages as in a live table): 24 hours of minute rollups, 30 days of
hourly rollups, then 16 minutes of 1-second raw samples, last, so that they end when the queries
begin. The packed values are those of simulated H100 nodes (a few dozen of them, reused: their size
and what unpacking them costs are what matter here). Then random nodes are charted through the full
HTTP stack (token auth included) and p50/p99 are printed per window; target < 100 ms. Each answer must
hold the points of the data in its window, counted from the newest sample filled, not from the wall
clock: a fill that took minutes on a loaded machine does not fail the run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/telemetry_queries.py
        [--nodes 1000] [--requests 40] [--keep]

``--keep`` leaves the filled database (``bench_telemetry_queries``) for another run, which then
refills only the raw samples. The last line printed is JSON.
"""

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datetime import UTC, datetime

from benchmarks.bench_fleet import GPUS, h100_nodes, percentiles
from benchmarks.scratch_database import scratch_postgresql

RAW_SECONDS = 16 * 60
MINUTES = 24 * 60
HOURS = 30 * 24
TEMPLATES = 32  # distinct packed values, reused round-robin


def templates() -> dict[str, list[tuple]]:
    """Packed values of simulated H100 nodes: raw GPU rows, and minute and hour rollups of them."""
    from agents.simulator.model import NodeModel
    from agents.simulator.profiles import profile_named
    from agents.simulator.workloads import Training
    from apps.telemetry.models import GPU_PACKING, ROLLUP_METRICS
    from apps.telemetry.models.samples import pack
    from apps.telemetry.rollups import ROLLUP_COLUMNS, rollup_row, stats_of

    start = 1_767_225_600.0
    raw = []
    for k in range(TEMPLATES):
        model = NodeModel(profile_named("h100"), f"bench-{k}", 1, Training(offset_s=k * 0.7), start=start)
        gpus, _ = model.sample(start + k)
        raw.append((pack(GPU_PACKING, gpus),))
    rollups = {}
    for name, samples in (("minute", 60), ("hour", 3600)):
        rows = []
        for k in range(TEMPLATES):
            summaries = {m: (10.0 + k, 50.0 + k + i, 90.0 + k) for i, m in enumerate(ROLLUP_METRICS)}
            row = rollup_row(0, datetime.now(UTC), {g: stats_of(samples, summaries) for g in range(GPUS)})
            rows.append(
                tuple(
                    value
                    for column, value in zip(ROLLUP_COLUMNS, row, strict=True)
                    if column not in ("node_id", "bucket")
                )
            )
        rollups[name] = rows
    return {"raw": raw, **rollups}


def fill(nodes: int) -> list[int]:
    """The nodes and their rows; on a kept database, only the raw samples again."""
    from django.db import connection, transaction

    from apps.inventory.models import Node
    from apps.telemetry.partitions import DAY, day_of, ensure_days
    from apps.telemetry.retention import create_partitions_ahead

    filled = list(Node.objects.filter(hostname__startswith="bench-").order_by("pk").values_list("pk", flat=True))
    if filled and len(filled) != nodes:
        sys.exit(f"The kept database holds {len(filled)} nodes, not {nodes}: run once without --keep to refill it.")
    node_ids = filled or sorted(node.pk for node in h100_nodes(nodes))
    assert node_ids[-1] == node_ids[0] + nodes - 1
    made = templates()
    today = day_of(datetime.now(UTC))
    with transaction.atomic(), connection.cursor() as cursor:
        create_partitions_ahead(datetime.now(UTC))
        for table in ("telemetry_nodegpusample", "telemetry_nodeminuterollup"):
            ensure_days(cursor, table, [today - DAY, today])
        for name, rows in made.items():
            width = len(rows[0])
            columns = ", ".join(f"c{i} " + ("bytea" if i == 0 else "float8") for i in range(width))
            cursor.execute(f"CREATE TEMPORARY TABLE bench_{name} (k int, {columns}) ON COMMIT DROP")
            cursor.executemany(
                f"INSERT INTO bench_{name} VALUES (%s{', %s' * width})", [(k, *row) for k, row in enumerate(rows)]
            )
        if not filled:
            rollup_columns = "gpus, _gpus, _util_gpu_total, _util_gpu_samples, _power_w_total"
            for table, unit, steps, template in (
                ("telemetry_nodeminuterollup", "minute", MINUTES, "bench_minute"),
                ("telemetry_nodehourrollup", "hour", HOURS, "bench_hour"),
            ):
                cursor.execute(
                    f"""
                    INSERT INTO {table} (node_id, bucket, {rollup_columns})
                    SELECT {node_ids[0]} + n, date_trunc('{unit}', now()) - (interval '1 {unit}') * ({steps} - s),
                           t.c0, t.c1::smallint, t.c2, t.c3::int, t.c4
                    FROM generate_series(0, {steps - 1}) AS s CROSS JOIN generate_series(0, {nodes - 1}) AS n
                    JOIN {template} AS t ON t.k = (n + s) % {TEMPLATES}
                    """
                )
                print(f"filled {table}: {cursor.rowcount:,} rows", flush=True)
        cursor.execute("TRUNCATE telemetry_nodegpusample")
        cursor.execute(
            f"""
            INSERT INTO telemetry_nodegpusample (node_id, ts, received_at, gpus)
            SELECT {node_ids[0]} + n, now() - interval '1 second' * ({RAW_SECONDS} - s), now(), t.c0
            FROM generate_series(1, {RAW_SECONDS}) AS s CROSS JOIN generate_series(0, {nodes - 1}) AS n
            JOIN bench_raw AS t ON t.k = (n + s) % {TEMPLATES}
            """
        )
        print(f"filled telemetry_nodegpusample: {cursor.rowcount:,} rows", flush=True)
    with connection.cursor() as cursor:
        for table in ("telemetry_nodegpusample", "telemetry_nodeminuterollup", "telemetry_nodehourrollup"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    return node_ids


def expected_points(window: str, newest: datetime) -> int:
    """The points a node's answer must hold now: every step of the window that the filled data covers,
    counted from ``newest``, the newest sample filled (the fill may have ended a while before, and
    the raw window slides off the data's start as the requests go on)."""
    from django.utils import timezone

    from apps.telemetry.models import NodeGpuSample
    from apps.telemetry.queries import WINDOWS

    spec = WINDOWS[window]
    if spec.source is not NodeGpuSample:
        return GPUS * int(spec.span / spec.step) * 9 // 10
    covered = spec.span - (timezone.now() - newest)
    return max(0, GPUS * int(covered / spec.step) - GPUS)


def measure(node_ids: list[int], requests: int) -> dict[str, dict[str, float]]:
    import random

    from django.core.handlers.wsgi import WSGIHandler
    from django.db.models import Max
    from django.test import RequestFactory

    from agents.gc_tuning import freeze_startup_objects
    from apps.accounts.models import ApiToken, User
    from apps.accounts.roles import Role
    from apps.telemetry.models import NodeGpuSample

    user, _ = User.objects.get_or_create(username="bench-viewer", defaults={"role": Role.VIEWER})
    _, secret = ApiToken.issue(user=user, name=f"bench-{time.time_ns()}", role=Role.VIEWER)
    # Django's handler and middleware as a server calls them; the test client would keep every response
    # in a reference cycle of its own, for the collector to free in the middle of later requests.
    handler, requests_of = WSGIHandler(), RequestFactory(HTTP_AUTHORIZATION=f"Bearer {secret}")
    freeze_startup_objects()  # the server's collector settings (controlplane/asgi.py), not CPython's defaults
    chosen = random.Random(7).sample(node_ids, min(requests, len(node_ids)))
    newest = NodeGpuSample.objects.aggregate(newest=Max("ts"))["newest"]
    results = {}
    for window, metric in (("15m", "util_gpu"), ("24h", "power_w"), ("30d", "temp_c")):
        timings, cpu = [], []
        for i in range(requests + 3):
            node_id = chosen[i % len(chosen)]
            expected = expected_points(window, newest)
            started, cpu_started = time.perf_counter(), time.process_time()
            path = f"/api/v1/nodes/{node_id}/telemetry?window={window}&metric={metric}"
            response = handler.get_response(requests_of.get(path, secure=True))
            elapsed = (time.perf_counter() - started) * 1000
            cpu_ms = (time.process_time() - cpu_started) * 1000
            assert response.status_code == 200, response.content[:300]
            points = sum(len(gpu["points"]) for gpu in json.loads(response.content)["gpus"])
            assert points >= expected, f"{window}: only {points} points of the {expected} its data holds"
            if i >= 3:  # the first requests warm up connections and code paths
                timings.append(elapsed)
                cpu.append(cpu_ms)
        results[window] = percentiles(timings) | {f"server_cpu_{k}": v for k, v in percentiles(cpu).items()}
        results[window]["points"] = points
        figures = results[window]
        print(
            f"{window:>4}  p50 {figures['p50_ms']:6.1f} ms   p99 {figures['p99_ms']:6.1f} ms   "
            f"(server CPU p50 {figures['server_cpu_p50_ms']:5.1f} ms, p99 {figures['server_cpu_p99_ms']:5.1f} ms)",
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
