"""The all-reduce bus bandwidth a set of nodes should reach, from what the inventory knows.

Bus bandwidth is nccl-tests' figure (algorithm bandwidth × 2(n−1)/n for all-reduce), which for a
ring equals the bandwidth of its slowest hop:

* inside a node, each GPU's NVLink bandwidth in one direction (450 GB/s on an H100 SXM);
* between nodes, NCCL runs one ring per NIC, so a node moves ``active NICs × slowest active NIC``
  (8 × 400 Gb/s = 400 GB/s on an HGX H100 with one NDR HCA per GPU);
* across leaf switches, that is scaled by the leaf's uplink to downlink ratio (the fabric's
  oversubscription where uplinks are not cabled in the inventory).

The figure is the minimum of these over the nodes, and the answer names what set it.
"""

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from decimal import Decimal

from django.db.models import Prefetch

from apps.inventory.choices import PortKind
from apps.inventory.models import NetworkPort, Node, NvLink, Switch
from apps.inventory.models.fabric import uplink_downlink_gbps

SCALE_OUT_KINDS = (PortKind.INFINIBAND, PortKind.ROCE)


@dataclass
class NodeBandwidth:
    hostname: str
    nvlink_gbs: float | None
    nvlink_source: str
    active_nics: int
    total_nics: int
    slowest_nic_gbps: int | None
    network_gbs: float
    leaf_switches: list[str]


@dataclass
class BusBandwidthEstimate:
    busbw_gbs: float
    limited_by: str
    nodes: list[NodeBandwidth]
    cross_leaf_factor: float = 1.0
    cross_leaf_source: str = ""
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _nvlink_gbs(node: Node, links: list[NvLink]) -> tuple[float | None, str]:
    """Per GPU, its best working NVLink in one direction; the node is as fast as its worst GPU."""
    if not links:
        per_direction = node.node_type.nvlink_gbs_per_direction
        return (per_direction or None), "node type"
    best: dict[int, float] = {gpu.pk: 0.0 for gpu in node.gpus.all()}
    for link in links:
        rate = link.gbs_per_direction if link.is_up else 0.0
        for gpu_id in (link.gpu_a_id, link.gpu_b_id):
            best[gpu_id] = max(best.get(gpu_id, 0.0), rate)
    return min(best.values(), default=0.0), "NVLink inventory"


def _node_bandwidth(node: Node, nvlinks: list[NvLink]) -> NodeBandwidth:
    nics = [p for p in node.ports.all() if p.kind in SCALE_OUT_KINDS]
    active = [p for p in nics if p.is_up and p._link_id is not None]
    # NCCL uses at most one NIC per GPU, the fastest ones: a slower frontend port does not count.
    usable = sorted(active, key=lambda p: p.rate_gbps, reverse=True)[: node.node_type.gpus_per_node]
    slowest = usable[-1].rate_gbps if usable else None
    nvlink, nvlink_source = _nvlink_gbs(node, nvlinks)
    leaves = sorted({p._peer_switch_port.switch.name for p in nics if p._peer_switch_port is not None})
    return NodeBandwidth(
        hostname=node.hostname,
        nvlink_gbs=nvlink,
        nvlink_source=nvlink_source,
        active_nics=len(usable),
        total_nics=len(nics),
        slowest_nic_gbps=slowest,
        network_gbs=len(usable) * (slowest or 0) / 8,
        leaf_switches=leaves,
    )


def _cross_leaf_factor(leaf_names: set[str]) -> tuple[float, str]:
    leaves = list(Switch.objects.filter(name__in=leaf_names).select_related("fabric"))
    capacity = uplink_downlink_gbps(leaves)
    factors: list[tuple[float, str]] = []
    for leaf in leaves:
        up, down = capacity[leaf.pk]
        if up and down:
            factors.append((min(1.0, up / down), f"{leaf.name} uplinks {up} Gb/s for {down} Gb/s of downlinks"))
        else:
            ratio = leaf.fabric.oversubscription_ratio or Decimal(1)
            factors.append((float(1 / ratio), f"{leaf.fabric.name} declared oversubscription {ratio}:1"))
    return min(factors, default=(1.0, "single leaf"))


def theoretical_busbw(nodes: Iterable[Node]) -> BusBandwidthEstimate:
    """The all-reduce bus bandwidth (GB/s) the fabric allows these nodes, and what limits it."""
    node_ids = [n.pk for n in nodes]
    if not node_ids:
        raise ValueError("At least one node is needed.")
    queryset = (
        Node.objects.filter(pk__in=node_ids)
        .select_related("node_type")
        .prefetch_related(
            "gpus",
            Prefetch("ports", queryset=NetworkPort.objects.select_related("_peer_switch_port__switch")),
        )
    )
    nvlinks_by_node: dict[int, list[NvLink]] = {}
    for link in NvLink.objects.filter(_node_id__in=node_ids):
        nvlinks_by_node.setdefault(link._node_id, []).append(link)
    per_node = [_node_bandwidth(node, nvlinks_by_node.get(node.pk, [])) for node in queryset]

    candidates: list[tuple[float, str]] = []
    notes: list[str] = []
    for nb in per_node:
        if nb.nvlink_gbs is None:
            notes.append(f"{nb.hostname}: no NVLink known; intra-node bandwidth not bounded here.")
        else:
            candidates.append(
                (
                    nb.nvlink_gbs,
                    f"NVLink on {nb.hostname} ({nb.nvlink_gbs:g} GB/s per GPU per direction, {nb.nvlink_source})",
                )
            )

    factor, factor_source = 1.0, "single node"
    if len(per_node) > 1:
        leaves = {leaf for nb in per_node for leaf in nb.leaf_switches}
        factor, factor_source = _cross_leaf_factor(leaves) if len(leaves) > 1 else (1.0, "all nodes under one leaf")
        for nb in per_node:
            described = (
                f"network of {nb.hostname} ({nb.active_nics} of {nb.total_nics} NICs active, "
                f"slowest {nb.slowest_nic_gbps or 0} Gb/s"
            )
            if factor < 1:
                described += f", × {factor:.2f} across leaves: {factor_source}"
            candidates.append((nb.network_gbs * factor, described + ")"))

    busbw, limited_by = min(candidates, default=(0.0, "no NVLink or network bandwidth known"))
    return BusBandwidthEstimate(
        busbw_gbs=round(busbw, 2),
        limited_by=limited_by,
        nodes=per_node,
        cross_leaf_factor=round(factor, 4),
        cross_leaf_source=factor_source,
        notes=notes,
    )
