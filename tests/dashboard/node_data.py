"""A node with everything its page shows: GPUs with a newest sample and the last minutes of raw
samples, cabled ports with samples, failures (open, acknowledged, resolved), lifecycle history."""

import math
from datetime import datetime, timedelta

from django.utils import timezone

from agents.protocol import GpuSample
from apps.failures.conditions import PORT_DOWN, Observation, xid_condition
from apps.failures.models import Failure
from apps.failures.recording import raise_failure
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from apps.telemetry.models import NodeGpuSample
from tests import factories

HW_SLOWDOWN_AND_POWER_CAP = 0x8 | 0x4
RAW_SAMPLES = 30  # one every 10 s: five minutes of history per GPU


def gpu_metrics(index: int, **fields: object) -> dict[str, object]:
    return {
        "gpu_index": index,
        "util_gpu": 90.0 - index,
        "util_mem": 40.0,
        "mem_used_mib": 60_000 + index,
        "temp_c": 60.0 + index,
        "power_w": 650.0 + index,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "throttle_reasons": 0,
        "ecc_corrected_volatile": 0,
        "ecc_uncorrected_volatile": 0,
        "ecc_corrected_aggregate": 3,
        "ecc_uncorrected_aggregate": 0,
        "remapped_rows_correctable": 1,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failed": False,
        "pcie_replay_count": 0,
        "nvlink_crc_errors": 0,
        "nvlink_replay_errors": 0,
        "nvlink_recovery_errors": 0,
        **fields,
    }


def wave(index: int, step: int) -> dict[str, object]:
    """A GPU's metrics ``step`` samples ago: a training step's rhythm, each GPU a little apart."""
    util = 70.0 + 25.0 * math.sin((step + index) / 3) - 2 * index
    return gpu_metrics(index, util_gpu=util, power_w=300.0 + 4 * util, temp_c=45.0 + util / 4 + index)


def reading(metrics: dict[str, object]) -> GpuSample:
    """The protocol's GPU sample of these metrics (``gpu_index`` as its ``index``)."""
    fields = {name: value for name, value in metrics.items() if name != "gpu_index"}
    return GpuSample(index=metrics["gpu_index"], **fields)


def store_samples(node: Node, now: datetime, *, gpus: int, ports: int) -> None:
    """The newest sample of every GPU (GPU 0 hot and slowed down), raw samples for the charts, and
    the newest sample of every port (the last port down, with link errors)."""
    odd = {"throttle_reasons": HW_SLOWDOWN_AND_POWER_CAP, "ecc_uncorrected_volatile": 2, "pcie_replay_count": 7}
    factories.latest_gpus(node, now, [gpu_metrics(i, **(odd if i == 0 else {})) for i in range(gpus)])
    NodeGpuSample.objects.bulk_create(
        NodeGpuSample.of(node.pk, now - timedelta(seconds=10 * s), [reading(wave(i, s)) for i in range(gpus)], now)
        for s in range(RAW_SAMPLES)
    )
    factories.latest_ports(
        node,
        now,
        [
            dict(
                device=f"mlx5_{p}",
                port=1,
                state="down" if p == ports - 1 else "active",
                rate_gbps=400.0,
                tx_gbps=120.5,
                rx_gbps=118.0,
                symbol_errors=11 if p == ports - 1 else 0,
                link_downed=int(p == ports - 1),
                rcv_errors=0,
            )
            for p in range(ports)
        ],
    )


def raise_failures(node: Node, now: datetime, *, count: int) -> list[Failure]:
    """An XID 79 on GPU 0 (open), a port down (acknowledged), and ``count - 2`` resolved XID 13s."""
    xid79 = raise_failure(Observation(node.pk, now, xid_condition(79), gpu_index=0, xid=79), actor="test")
    port = raise_failure(Observation(node.pk, now, PORT_DOWN, port_name="mlx5_1/1"), actor="test")
    port.acknowledge(actor="otto")
    resolved = []
    for i in range(count - 2):
        failure = raise_failure(
            Observation(node.pk, now - timedelta(hours=i + 1), xid_condition(13), gpu_index=1, xid=13), actor="test"
        )
        failure.resolve(actor="otto", note="job bug")
        resolved.append(failure)
    return [xid79, port, *resolved]


def node_with_history(
    hostname: str = "gpu-detail", *, gpus: int = 8, ports: int = 4, failures: int = 4, transitions: int = 2
) -> Node:
    cluster = factories.cluster()
    node = factories.node(cluster, factories.node_type(nics=ports, gpus=gpus), hostname)
    factories.nvlink_mesh(node)
    leaf = factories.switch(factories.fabric(cluster))
    factories.cable_node_to_leaf(node, leaf)
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(liveness=Liveness.ONLINE, last_seen_at=now, serial="SN-4242")
    node.refresh_from_db()
    for i in range(transitions):
        if i % 2:
            factories.burn_in_pass(node, run=f"burn-in run #{i}")
        node.transition("quarantined" if i % 2 == 0 else "in_service", actor="otto", reason=f"change {i}")
    store_samples(node, now, gpus=gpus, ports=ports)
    raise_failures(node, now, count=failures)
    return node
