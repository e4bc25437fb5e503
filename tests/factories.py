"""Small builders for test data. Each returns saved rows; names are unique per call."""

import itertools
import uuid
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from agents.protocol import GpuSample, PortSample
from apps.costs.choices import PriceKind
from apps.costs.models import EnergyPrice, GpuPrice
from apps.inventory.choices import FabricKind, FabricTopology, Lifecycle, LinkState, PortKind, SwitchTier
from apps.inventory.models import (
    BurnInResult,
    Cluster,
    Fabric,
    Gpu,
    Link,
    LinkTermination,
    NetworkPort,
    Node,
    NodeType,
    NvLink,
    PortTemplate,
    Switch,
    SwitchPort,
)
from apps.telemetry.models import LatestGpuSample, LatestPortSample

_counter = itertools.count(1)


def cluster(name: str | None = None) -> Cluster:
    return Cluster.objects.create(name=name or f"cluster-{next(_counter)}")


def node_type(name: str | None = None, *, nics: int = 8, gpus: int = 8, rate_gbps: int = 400) -> NodeType:
    nt = NodeType.objects.create(
        name=name or f"hgx-h100-{next(_counter)}",
        gpu_model="NVIDIA H100 80GB HBM3",
        gpus_per_node=gpus,
        gpu_memory_gb=80,
        peak_bf16_tflops=Decimal("989.4"),
        hbm_bandwidth_gbs=3350,
        nvlink_bandwidth_gbs=900,
        network_gbps_per_gpu=rate_gbps,
        gpu_power_limit_w=700,
    )
    PortTemplate.objects.bulk_create(
        PortTemplate(node_type=nt, device_name=f"mlx5_{i}", kind=PortKind.INFINIBAND, rate_gbps=rate_gbps)
        for i in range(nics)
    )
    return nt


def gpu_uuid() -> str:
    return f"GPU-{uuid.uuid4()}"


def node(
    cluster_: Cluster, type_: NodeType, hostname: str | None = None, *, lifecycle: str = Lifecycle.IN_SERVICE
) -> Node:
    n = Node.objects.create(
        hostname=hostname or f"gpu-{next(_counter):04d}", cluster=cluster_, node_type=type_, lifecycle=lifecycle
    )
    Gpu.objects.bulk_create(
        Gpu(node=n, index=i, uuid=gpu_uuid(), model=type_.gpu_model, pci_bus_id=f"0000:{0x18 + i:02x}:00.0")
        for i in range(type_.gpus_per_node)
    )
    return n


def burn_in_pass(n: Node, *, run: str = "burn-in run #1") -> BurnInResult:
    """What the burn-in runs record when a node passes: it may return to service."""
    return BurnInResult.objects.record(n, passed=True, run=run, summary="every check passed")


def nvlink_mesh(n: Node, *, lanes: int = 18, bandwidth_gbs: int = 900) -> None:
    gpus = list(n.gpus.order_by("index"))
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            NvLink.objects.create(gpu_a=a, gpu_b=b, lanes=lanes, bandwidth_gbs=bandwidth_gbs)


def fabric(cluster_: Cluster, *, oversubscription: str = "1") -> Fabric:
    return Fabric.objects.create(
        name=f"ib-{next(_counter)}",
        cluster=cluster_,
        kind=FabricKind.INFINIBAND,
        topology=FabricTopology.FAT_TREE,
        oversubscription_ratio=Decimal(oversubscription),
    )


def switch(fabric_: Fabric, tier: str = SwitchTier.LEAF) -> Switch:
    return Switch.objects.create(name=f"{tier}-{next(_counter)}", fabric=fabric_, tier=tier)


def cable(a: NetworkPort | SwitchPort, b: NetworkPort | SwitchPort) -> Link:
    link = Link.objects.create()
    for end, endpoint in (("A", a), ("B", b)):
        LinkTermination.objects.create(
            link=link,
            end=end,
            network_port=endpoint if isinstance(endpoint, NetworkPort) else None,
            switch_port=endpoint if isinstance(endpoint, SwitchPort) else None,
        )
    return link


def cable_node_to_leaf(n: Node, leaf: Switch, *, link_state: str = LinkState.ACTIVE) -> None:
    """Cable every port of the node to a fresh port on the leaf."""
    for port in n.ports.order_by("device_name"):
        port.link_state = link_state
        port.save(update_fields=["link_state"])
        sp = SwitchPort.objects.create(
            switch=leaf, name=f"p{leaf.ports.count() + 1}", rate_gbps=port.rate_gbps, link_state=link_state
        )
        cable(port, sp)


def uplink(leaf: Switch, spine: Switch, *, count: int, rate_gbps: int = 400) -> None:
    for _ in range(count):
        a = SwitchPort.objects.create(switch=leaf, name=f"up{leaf.ports.count() + 1}", rate_gbps=rate_gbps)
        b = SwitchPort.objects.create(switch=spine, name=f"p{spine.ports.count() + 1}", rate_gbps=rate_gbps)
        cable(a, b)


def gpu_price(type_: NodeType, *, valid_from: date, valid_to: date | None = None, **fields: object) -> GpuPrice:
    """An on-demand price of 2.50 per GPU-hour unless ``fields`` say otherwise (kind=owned, ...)."""
    if fields.get("kind") != PriceKind.OWNED:
        fields = {"kind": PriceKind.ON_DEMAND, "hourly_price_per_gpu": Decimal("2.50"), **fields}
    return GpuPrice.objects.create(node_type=type_, valid_from=valid_from, valid_to=valid_to, **fields)


def energy_price(
    cluster_: Cluster, *, valid_from: date, valid_to: date | None = None, price_per_kwh: str = "0.12", pue: str = "1.3"
) -> EnergyPrice:
    return EnergyPrice.objects.create(
        cluster=cluster_,
        valid_from=valid_from,
        valid_to=valid_to,
        price_per_kwh=Decimal(price_per_kwh),
        pue=Decimal(pue),
    )


def latest_gpus(
    n: Node | int, ts: datetime, gpus: Iterable[Mapping[str, Any]], *, received_at: datetime | None = None
) -> LatestGpuSample:
    """A node's newest GPU sample: each GPU as a mapping of ``gpu_index`` and its metrics (a metric left
    out is absent), packed into the node's one row as the writer packs it."""
    readings = [GpuSample(index=g["gpu_index"], **{k: v for k, v in g.items() if k != "gpu_index"}) for g in gpus]
    node_id = n if isinstance(n, int) else n.pk
    row = LatestGpuSample.of(node_id, ts, readings, received_at or ts)
    row.save(force_insert=True)
    return row


def latest_ports(
    n: Node | int, ts: datetime, ports: Iterable[Mapping[str, Any]], *, received_at: datetime | None = None
) -> LatestPortSample:
    """A node's newest port sample: each port as a mapping of ``PortSample``'s fields (``device``,
    ``port``, ``state``, readings left out absent), packed into the node's one row."""
    node_id = n if isinstance(n, int) else n.pk
    row = LatestPortSample.of(node_id, ts, [PortSample(**port) for port in ports], received_at or ts)
    row.save(force_insert=True)
    return row
