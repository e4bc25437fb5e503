"""Server time of the failures, topology, racks and reliability pages at the 1,000-node scale.

A scratch PostgreSQL database gets 1,000 nodes x 8 GPUs in racks of 4 under 32 leaf switches (8 NDR
ports per node, each cabled to its leaf; 4 spines), the newest sample of every port (as the ingest
keeps it, written server-side with ``generate_series``), and a year
of failures (an XID with a side effect every few hours, some open). Then each page is fetched
through the full Django stack as a signed-in viewer, and p50/p99 are printed per page.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/ops_pages.py
        [--nodes 1000] [--requests 15] [--keep]

The last line printed is JSON.
"""

import argparse
import json
import os
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_fleet import GPUS, h100_nodes, percentiles
from benchmarks.scratch_database import scratch_postgresql

PORTS = 8
NODES_PER_LEAF = 32
NODES_PER_RACK = 4
FAILURES_PER_DAY = 8
PAGES = {  # the topology first: its port samples must still be recent (apps/telemetry/links.py RECENT)
    "topology": "/topology/",
    "failures": "/failures/",
    "failures_all": "/failures/?state=all",
    "racks": "/racks/",
    "reliability_30d": "/reliability/?days=30",
    "reliability_365d": "/reliability/?days=365",
}


def build_fleet(nodes: int) -> list[int]:
    """Inventory in bulk: nodes, GPUs, racks, a two-tier fabric, every node port cabled to its leaf."""
    from apps.inventory.choices import FabricKind, FabricTopology, Lifecycle, LinkState, PortKind, SwitchTier
    from apps.inventory.models import Fabric, Link, NetworkPort, Node, Rack, Switch, SwitchPort

    created = h100_nodes(nodes, lifecycle=Lifecycle.IN_SERVICE)
    cluster = created[0].cluster
    fabric = Fabric.objects.create(
        name="bench-ib", cluster=cluster, kind=FabricKind.INFINIBAND, topology=FabricTopology.FAT_TREE
    )
    leaves = Switch.objects.bulk_create(
        Switch(name=f"leaf-{i:02d}", fabric=fabric, tier=SwitchTier.LEAF) for i in range(-(-nodes // NODES_PER_LEAF))
    )
    Switch.objects.bulk_create(Switch(name=f"spine-{i}", fabric=fabric, tier=SwitchTier.SPINE) for i in range(4))
    racks = Rack.objects.bulk_create(
        Rack(cluster=cluster, name=f"r{i:03d}", power_budget_kw=45) for i in range(-(-nodes // NODES_PER_RACK))
    )
    for n, node in enumerate(created):
        node.rack, node.rack_position = racks[n // NODES_PER_RACK], 2 + 9 * (n % NODES_PER_RACK)
    Node.objects.bulk_update(created, ["rack", "rack_position"])
    ends = [(n, node, p) for n, node in enumerate(created) for p in range(PORTS)]
    links = Link.objects.bulk_create(Link() for _ in ends)
    switch_ports = SwitchPort.objects.bulk_create(
        SwitchPort(
            switch=leaves[n // NODES_PER_LEAF],
            name=f"{node.hostname}-{p}",
            rate_gbps=400,
            link_state=LinkState.ACTIVE,
            _link=link,
        )
        for (n, node, p), link in zip(ends, links, strict=True)
    )
    NetworkPort.objects.bulk_create(
        NetworkPort(
            node=node,
            device_name=f"mlx5_{p}",
            kind=PortKind.INFINIBAND,
            rate_gbps=400,
            link_state=LinkState.ACTIVE,
            _link=link,
            _peer_switch_port=switch_port,
        )
        for (_, node, p), link, switch_port in zip(ends, links, switch_ports, strict=True)
    )
    return sorted(node.pk for node in created)


def fill_port_samples(node_ids: list[int]) -> None:
    """The newest sample of every port, a second old (the topology page reads no other)."""
    from django.db import connection, transaction
    from django.utils import timezone

    from agents.protocol import PortSample
    from apps.telemetry.models import LatestPortSample

    started = time.perf_counter()
    now = timezone.now()
    with transaction.atomic():
        LatestPortSample.objects.all().delete()
        LatestPortSample.objects.bulk_create(
            (
                LatestPortSample.of(
                    node_id,
                    now - timedelta(seconds=1),
                    [
                        PortSample(
                            device=f"mlx5_{p}",
                            port=1,
                            state="active",
                            rate_gbps=400.0,
                            tx_gbps=float((node_id * PORTS + p) % 400),
                            rx_gbps=float((node_id * 7 + p) % 400),
                            symbol_errors=0,
                            link_downed=0,
                            rcv_errors=0,
                        )
                        for p in range(PORTS)
                    ],
                    now,
                )
                for node_id in node_ids
            ),
            batch_size=1000,
        )
    rows = len(node_ids)
    with connection.cursor() as cursor:
        # The whole database, as autovacuum would have it soon after an import: without statistics
        # on the inventory just filled, the planner takes 8,000 ports for 2,000 and joins them to
        # their samples by nested loops (220 ms instead of 20).
        cursor.execute("VACUUM ANALYZE")
    print(f"filled the newest port samples of {rows:,} nodes in {time.perf_counter() - started:.0f} s", flush=True)


def fill_failures(node_ids: list[int]) -> None:
    """A year of XIDs, ``FAILURES_PER_DAY`` a day on nodes picked in turn, each with a side effect;
    the last day's still open."""
    from django.utils import timezone

    from apps.failures.choices import FailureKind, FailureState, Severity
    from apps.failures.models import Failure

    now = timezone.now()
    count = 365 * FAILURES_PER_DAY
    common = {"kind": FailureKind.XID, "recommended_action": "Drain the node and reset the GPU."}

    def at(i: int) -> timedelta:
        return timedelta(hours=24 * 365 * i / count)

    causes = Failure.objects.bulk_create(
        Failure(
            node_id=node_ids[(i * 37) % len(node_ids)],
            gpu_index=i % GPUS,
            code="xid-79",
            xid=79,
            severity=Severity.CRITICAL,
            title="XID 79: GPU has fallen off the bus",
            first_seen=now - at(i),
            last_seen=now - at(i),
            state=FailureState.OPEN if at(i) < timedelta(days=1) else FailureState.RESOLVED,
            **common,
        )
        for i in range(count)
    )
    Failure.objects.bulk_create(
        Failure(
            node_id=cause.node_id,
            gpu_index=cause.gpu_index,
            code="xid-45",
            xid=45,
            severity=Severity.INFO,
            title="XID 45: Preemptive cleanup",
            first_seen=cause.first_seen,
            last_seen=cause.last_seen,
            state=cause.state,
            cause=cause,
            **common,
        )
        for cause in causes
    )
    print(f"filled failures: {2 * count:,} rows", flush=True)


def measure(requests: int) -> dict[str, dict[str, float]]:
    from django.test import Client

    from agents.gc_tuning import freeze_startup_objects
    from apps.accounts.models import User
    from apps.accounts.roles import Role

    client = Client()
    freeze_startup_objects()  # the server's collector settings (controlplane/asgi.py), not CPython's defaults
    client.force_login(User.objects.get_or_create(username="bench-viewer", defaults={"role": Role.VIEWER})[0])
    results = {}
    for name, path in PAGES.items():
        timings, cpu = [], []
        for i in range(requests + 2):
            started, cpu_started = time.perf_counter(), time.process_time()
            response = client.get(path, secure=True)
            elapsed = (time.perf_counter() - started) * 1000
            cpu_ms = (time.process_time() - cpu_started) * 1000
            assert response.status_code == 200, (path, response.status_code)
            if name == "topology":  # every node's load is known: its ports reported in the last minute
                assert response.content.count(b'<span class="num">\xe2\x80\x93</span>') == 0, "no recent samples"
            if i >= 2:  # the first requests warm up connections and code paths
                timings.append(elapsed)
                cpu.append(cpu_ms)
        figures = percentiles(timings) | {f"server_cpu_{k}": v for k, v in percentiles(cpu).items()}
        results[name] = figures | {"kb": round(len(response.content) / 1024)}
        print(
            f"{name:>17}  p50 {figures['p50_ms']:7.1f} ms   p99 {figures['p99_ms']:7.1f} ms   "
            f"(server CPU p50 {figures['server_cpu_p50_ms']:6.1f} ms, p99 {figures['server_cpu_p99_ms']:6.1f} ms)",
            flush=True,
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=15, help="requests per page")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database (bench_ops_pages)")
    args = parser.parse_args()
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    warnings.filterwarnings("ignore", "No directory at")  # collected static files: not needed here
    with scratch_postgresql("bench_ops_pages", keep=args.keep):
        from django.test import override_settings

        from apps.inventory.models import Node

        if not Node.objects.exists():
            fill_failures(build_fleet(args.nodes))
        node_ids = sorted(Node.objects.values_list("pk", flat=True))
        if len(node_ids) != args.nodes:
            sys.exit(f"The kept database holds {len(node_ids)} nodes, not {args.nodes}: run once without --keep.")
        fill_port_samples(node_ids)  # again on every run: the page shows the last minute only
        plain_static = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
        with override_settings(
            STORAGES={
                "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
                "staticfiles": plain_static,
            }
        ):
            results = measure(args.requests)
    print(json.dumps({"nodes": args.nodes, "pages": results}))


if __name__ == "__main__":
    main()
