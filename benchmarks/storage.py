"""Telemetry storage on PostgreSQL, in the compact layout (docs/telemetry-storage.md): bytes on disk per
GPU sample and per GPU-minute of rollup (every field reported, indexes included), the disk a day of a
1,000-node fleet takes at the default retention, how long retention takes to drop a day, and the chart
and topology latencies at the 1,000-node scale (benchmarks/telemetry_queries.py and
benchmarks/ops_pages.py, each on a scratch database of its own).

The sizes come from simulated H100 nodes (``agents/simulator``, a training workload: every field an
H100 reports, the counters, limits and clocks the same on all GPUs of a healthy node as on real ones)
written through the product's writer (storage.write_batch) and rolled up by the minute pass, then
measured with ``pg_total_relation_size`` over every partition.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/storage.py
        [--nodes 1000] [--seconds 120] [--chart-nodes 1000] [--skip-latency]

Targets: bytes_per_gpu_sample <= 60, bytes_per_gpu_minute <= 100, chart p99 < 100 ms per window,
topology p99 < 200 ms. Beside each latency, the server's own CPU time per request (``server_cpu_``:
the benchmark process's, which is the server's here; PostgreSQL's is not in it), which other
processes on a loaded machine change far less than the wall time. The last line printed is JSON.
"""

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_fleet import GPUS, h100_nodes
from benchmarks.scratch_database import scratch_postgresql

REPO = Path(__file__).resolve().parents[1]
PORTS = 8  # what an H100 node of the simulator reports


def write_fleet(node_ids: list[int], seconds: int) -> tuple[int, int]:
    """``seconds`` of every node's samples through the writer, a second of the fleet per batch; return
    (GPU samples, port samples) stored."""
    from agents.protocol import NodeSample, Telemetry
    from agents.simulator.model import NodeModel
    from agents.simulator.profiles import profile_named
    from agents.simulator.workloads import Training
    from apps.telemetry.storage import Submission, write_batch

    start = time.time() - seconds - 120
    models = {
        node_id: NodeModel(profile_named("h100"), f"bench-{i:04d}", 7, Training(offset_s=i * 0.37), start=start)
        for i, node_id in enumerate(node_ids)
    }
    gpu_samples = port_samples = 0
    started = time.perf_counter()
    for second in range(seconds):
        batch = []
        for node_id, model in models.items():
            gpus, ports = model.sample(start + second)
            batch.append(
                Submission(node_id, Telemetry(seq=second + 1, samples=[NodeSample(start + second, gpus, ports)]))
            )
        stored = write_batch(batch)
        gpu_samples += stored.gpu_rows
        port_samples += stored.port_rows
    print(f"wrote {gpu_samples:,} GPU samples in {time.perf_counter() - started:.0f} s", flush=True)
    return gpu_samples, port_samples


def table_bytes(table: str) -> int:
    """The heap (with TOAST) and the indexes of a table's partitions that hold rows: what a table of
    any size takes per row (an empty partition's index pages and a small table's free space map are a
    fixed cost that a day of 8,000 samples a second dwarfs)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute(
            """
            SELECT coalesce(sum(
                pg_relation_size(c.oid) + coalesce(pg_relation_size(nullif(c.reltoastrelid, 0)), 0)
                + (SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) FROM pg_index i WHERE i.indrelid = c.oid)
            ), 0)
            FROM pg_class c
            WHERE (c.oid = %s::regclass OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = %s::regclass))
              AND c.relkind = 'r' AND c.reltuples > 0
            """,
            [table, table],
        )
        return int(cursor.fetchone()[0])


def measure_sizes(nodes: int, seconds: int) -> dict[str, Any]:
    from django.conf import settings

    from apps.telemetry.models import NodeMinuteRollup
    from apps.telemetry.rollups import rollup_minutes

    node_ids = sorted(node.pk for node in h100_nodes(nodes))
    gpu_samples, port_samples = write_fleet(node_ids, seconds)
    now = datetime.now(UTC)
    rollup_minutes(now - timedelta(seconds=seconds + 300), now, now=now)
    gpu_minutes = NodeMinuteRollup.objects.count() * GPUS
    per_sample = table_bytes("telemetry_nodegpusample") / gpu_samples
    per_port = table_bytes("telemetry_nodeportsample") / port_samples
    per_minute = table_bytes("telemetry_nodeminuterollup") / gpu_minutes
    fleet_gpus = 1000 * GPUS
    raw_day = fleet_gpus * 86_400 * per_sample + 1000 * PORTS * 86_400 * per_port
    rollup_day = fleet_gpus * 1440 * per_minute * (1 + 1 / 60)  # minutes, and the hours made of them
    # Kept at the defaults: raw samples up to a day past their retention (whole days are dropped).
    raw_days_kept = settings.TELEMETRY_RAW_RETENTION_HOURS / 24 + 1
    return {
        "bytes_per_gpu_sample": round(per_sample, 1),
        "bytes_per_port_sample": round(per_port, 1),
        "bytes_per_gpu_minute": round(per_minute, 1),
        "disk_gb_per_day_1000_nodes": round((raw_day + rollup_day) / 1e9, 1),
        "disk_gb_raw_kept_1000_nodes": round(raw_day * raw_days_kept / 1e9, 1),
        "disk_gb_minute_rollups_kept_1000_nodes": round(
            fleet_gpus * 1440 * per_minute * settings.TELEMETRY_MINUTE_RETENTION_DAYS / 1e9, 1
        ),
        "gpu_samples_measured": gpu_samples,
    }


def measure_retention_drop() -> dict[str, Any]:
    """Copy the filled raw samples into a day 10 days back, then time retention dropping it."""
    from django.db import connection, transaction

    from apps.telemetry.partitions import day_of, ensure_days
    from apps.telemetry.retention import apply_retention

    old = datetime.now(UTC) - timedelta(days=10)
    with transaction.atomic(), connection.cursor() as cursor:
        ensure_days(cursor, "telemetry_nodegpusample", [day_of(old)])
        cursor.execute(
            "INSERT INTO telemetry_nodegpusample (node_id, ts, received_at, gpus) "
            "SELECT node_id, date_trunc('day', %s::timestamptz) + (ts - date_trunc('day', ts)), received_at, gpus "
            "FROM telemetry_nodegpusample",
            [old],
        )
        rows = cursor.rowcount
    started = time.perf_counter()
    report = apply_retention(datetime.now(UTC))
    elapsed = (time.perf_counter() - started) * 1000
    print(f"retention dropped {report.dropped} ({rows:,} rows in the day) in {elapsed:.0f} ms", flush=True)
    return {"retention_drop_ms": round(elapsed, 1), "retention_dropped_rows": rows}


def last_json_line(argv: list[str]) -> dict[str, Any]:
    output = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes whose samples are measured")
    parser.add_argument("--seconds", type=int, default=120, help="seconds of samples written")
    parser.add_argument("--chart-nodes", type=int, default=1000, help="fleet size for the chart and topology figures")
    parser.add_argument("--skip-latency", action="store_true", help="sizes and retention only")
    args = parser.parse_args()
    with scratch_postgresql("bench_storage"):
        result = measure_sizes(args.nodes, args.seconds) | measure_retention_drop()
    for name, value in result.items():
        print(f"{name:>40}  {value}", flush=True)
    if not args.skip_latency:
        charts = last_json_line(["benchmarks/telemetry_queries.py", "--nodes", str(args.chart_nodes)])
        for window, figures in charts["windows"].items():
            result |= {f"chart_{window}_{k}": figures[k] for k in ("p99_ms", "server_cpu_p99_ms")}
        pages = last_json_line(["benchmarks/ops_pages.py", "--nodes", str(args.chart_nodes)])
        topology = pages["pages"]["topology"]
        result |= {"topology_p99_ms": topology["p99_ms"], "topology_server_cpu_p99_ms": topology["server_cpu_p99_ms"]}
        for name in sorted(key for key in result if key.startswith(("chart_", "topology_"))):
            print(f"{name:>40}  {result[name]}", flush=True)
    print(json.dumps({"nodes": args.nodes, "seconds": args.seconds} | result))


if __name__ == "__main__":
    main()
