"""``GET /metrics`` at the 1,000-node scale: server time, size and queries of one scrape, whole and per cluster.

A scratch PostgreSQL database gets 1,000 nodes x 8 GPUs in two clusters and racks of 4, the newest
sample of every GPU with every field reported and of 8 ports a node with every counter (as the ingest
keeps them, written server-side with ``generate_series``), an XID count on a GPU of every tenth node,
an open failure on every twentieth, a gateway refusal on every fiftieth, every agent's buffer and two
server processes' ingest totals. Then ``/metrics`` is fetched through the full Django stack with a
viewer's API token, whole and limited to one cluster, and each collector is timed on its own.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/metrics.py
        [--nodes 1000] [--requests 9] [--keep]

The last line printed is JSON.
"""

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_fleet import GPUS, h100_nodes
from benchmarks.scratch_database import scratch_postgresql

PORTS = 8
NODES_PER_RACK = 4
CLUSTERS = ("bench", "bench-west")  # h100_nodes makes the first; half the nodes move to the second


def build_fleet(nodes: int) -> list[int]:
    from apps.inventory.choices import Lifecycle
    from apps.inventory.models import Cluster, Node, Rack

    created = h100_nodes(nodes, lifecycle=Lifecycle.IN_SERVICE)
    west = Cluster.objects.create(name=CLUSTERS[1])
    for n, node in enumerate(created):
        node.cluster = west if n % 2 else created[0].cluster
    racks = Rack.objects.bulk_create(
        Rack(cluster=node.cluster, name=f"r{n // NODES_PER_RACK:03d}")
        for n, node in enumerate(created)
        if n % NODES_PER_RACK < 2  # the first node of each cluster in the rack's group of 4
    )
    by_cluster_and_group = {(rack.cluster_id, rack.name): rack for rack in racks}
    for n, node in enumerate(created):
        node.rack = by_cluster_and_group[(node.cluster_id, f"r{n // NODES_PER_RACK:03d}")]
    Node.objects.bulk_update(created, ["cluster", "rack"])
    return sorted(node.pk for node in created)


def port_sample(node_id: int, p: int) -> Any:
    from agents.protocol import PortSample

    return PortSample(
        device=f"mlx5_{p}",
        port=1,
        state="active",
        rate_gbps=400.0,
        tx_gbps=180.5,
        rx_gbps=175.25,
        symbol_errors=node_id % 7,
        link_downed=node_id % 3,
        rcv_errors=0,
        tx_bytes=node_id * 123456789,
        rx_bytes=node_id * 987654321,
    )


def fill(node_ids: list[int]) -> None:
    """The newest GPU and port samples of every node, and something in every other family."""
    from django.db import connection
    from django.utils import timezone

    from agents.protocol import GpuSample
    from apps.failures.choices import FailureKind, Severity
    from apps.failures.models import Failure
    from apps.gateway.models import GatewayCounter, NodeAgent
    from apps.telemetry.models import GPU_PACKING, IngestProcess, LatestGpuSample, LatestPortSample, XidCount

    constant = {float: 1.5, bool: False}
    gpus = [
        GpuSample(index=g, **{f.name: constant.get(f.kind, 1) for f in GPU_PACKING.fields[1:]}) for g in range(GPUS)
    ]
    started = time.perf_counter()
    now = timezone.now()
    at = now - timedelta(seconds=1)
    LatestGpuSample.objects.bulk_create((LatestGpuSample.of(n, at, gpus, now) for n in node_ids), batch_size=1000)
    LatestPortSample.objects.bulk_create(
        (LatestPortSample.of(n, at, [port_sample(n, p) for p in range(PORTS)], now) for n in node_ids),
        batch_size=1000,
    )
    XidCount.objects.bulk_create(
        XidCount(node_id=node_id, gpu_index=n % GPUS, xid=xid, count=n + 1, last_ts=now)
        for n, node_id in enumerate(node_ids[::10])
        for xid in (13, 79)
    )
    Failure.objects.bulk_create(
        Failure(
            node_id=node_id,
            gpu_index=0,
            kind=FailureKind.XID,
            code="xid-79",
            xid=79,
            severity=Severity.CRITICAL,
            title="XID 79: GPU has fallen off the bus",
            recommended_action="Drain the node and reset the GPU.",
            first_seen=now,
            last_seen=now,
        )
        for node_id in node_ids[::20]
    )
    GatewayCounter.objects.bulk_create(
        GatewayCounter(node_id=node_id, code="invalid", count=3) for node_id in node_ids[::50]
    )
    NodeAgent.objects.bulk_create(
        NodeAgent(node_id=node_id, buffered_samples=0, dropped_samples=node_id % 2, buffer_reported_at=now)
        for node_id in node_ids
    )
    totals = dict.fromkeys(("messages", "gpu_samples", "port_samples", "duplicates", "failed_batches"), 1000)
    IngestProcess.objects.bulk_create(
        IngestProcess(process=f"bench:{pid}", updated_at=now, pending_rows=0, lag_s=0.4, write_s=0.02, **totals)
        for pid in (1, 2)
    )
    with connection.cursor() as cursor:
        for table in ("telemetry_latestgpusample", "telemetry_latestportsample"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    print(f"filled the newest samples of {len(node_ids):,} nodes in {time.perf_counter() - started:.0f} s", flush=True)


def measure(requests: int) -> dict[str, Any]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from apps.accounts.models import ApiToken, User
    from apps.accounts.roles import Role
    from apps.core.metrics import Scrape, registry

    user = User.objects.get_or_create(username="bench-scraper", defaults={"role": Role.VIEWER})[0]
    ApiToken.objects.filter(user=user).delete()  # a kept database has the last run's
    _, secret = ApiToken.issue(user=user, name="bench-prometheus", role=Role.VIEWER)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    results: dict[str, Any] = {}
    for name, path in (("whole", "/metrics"), ("one_cluster", f"/metrics?cluster={CLUSTERS[0]}")):
        timings = []
        for i in range(requests + 2):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(path, secure=True)
                elapsed = (time.perf_counter() - started) * 1000
            assert response.status_code == 200, (path, response.status_code)
            if i >= 2:  # the first requests warm up connections, code paths and the token's first use
                timings.append(elapsed)
        timings.sort()
        body = response.content
        results[name] = {
            "p50_ms": round(statistics.median(timings), 1),
            "max_ms": round(timings[-1], 1),
            "lines": body.count(b"\n"),
            "mb": round(len(body) / 1e6, 1),
            "queries": len(queries),
        }
        print(
            f"{name:>12}  p50 {results[name]['p50_ms']:7.1f} ms  max {results[name]['max_ms']:7.1f} ms  "
            f"{results[name]['lines']:,} lines  {results[name]['queries']} queries",
            flush=True,
        )
    scrape = Scrape(timezone.now())
    by_collector = {}
    for collector in registry.collectors:
        started = time.perf_counter()
        lines = sum(len(family.samples) for family in collector(scrape))
        by_collector[collector.__module__] = {"ms": round((time.perf_counter() - started) * 1000, 1), "series": lines}
    results["collectors"] = by_collector
    for module, figures in by_collector.items():
        print(f"{module:>38}  {figures['ms']:7.1f} ms  {figures['series']:,} series", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=9, help="requests per variant")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database (bench_metrics)")
    args = parser.parse_args()
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    warnings.filterwarnings("ignore", "No directory at")  # collected static files: not needed here
    with scratch_postgresql("bench_metrics", keep=args.keep):
        from django.test import override_settings

        from apps.inventory.models import Node

        if not Node.objects.exists():
            fill(build_fleet(args.nodes))
        if Node.objects.count() != args.nodes:
            sys.exit(f"The kept database holds {Node.objects.count()} nodes, not {args.nodes}: run without --keep.")
        with override_settings(TELEMETRY_METRICS_MAX_AGE_S=24 * 3600):  # a kept database's samples stay fresh
            results = measure(args.requests)
    print(json.dumps({"nodes": args.nodes, **results}))


if __name__ == "__main__":
    main()
