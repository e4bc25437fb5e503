"""The benchmarks' fleet: one cluster of 8-GPU H100 nodes (``bench-0000`` ...) with their GPUs, made in
bulk on the scratch database (benchmarks/scratch_database.py); and the percentiles the page and query
benchmarks report of it."""

import statistics
from decimal import Decimal
from typing import Any

GPUS = 8


def h100_nodes(count: int, **node_fields: Any) -> list[Any]:
    """``count`` nodes of one cluster and node type, each with its 8 GPUs, numbered in order; the same
    ``node_fields`` (lifecycle, ...) for each. Returns the nodes, saved."""
    from apps.inventory.models import Cluster, Gpu, Node, NodeType

    cluster = Cluster.objects.create(name="bench")
    node_type = NodeType.objects.create(
        name="bench-h100",
        gpu_model="NVIDIA H100 80GB HBM3",
        gpus_per_node=GPUS,
        gpu_memory_gb=80,
        peak_bf16_tflops=Decimal("989.4"),
        hbm_bandwidth_gbs=3350,
        nvlink_bandwidth_gbs=900,
        network_gbps_per_gpu=400,
        gpu_power_limit_w=700,
    )
    nodes = Node.objects.bulk_create(
        Node(hostname=f"bench-{n:04d}", cluster=cluster, node_type=node_type, **node_fields) for n in range(count)
    )
    Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-{node.pk:08x}-0000-0000-0000-{i:012x}", model=node_type.gpu_model)
        for node in nodes
        for i in range(GPUS)
    )
    return nodes


def percentiles(values_ms: list[float]) -> dict[str, float]:
    """``{"p50_ms", "p99_ms"}`` of some requests' timings."""
    ordered = sorted(values_ms)
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
    }
