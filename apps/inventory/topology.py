"""The fabrics as an ops engineer reads them: each fabric's switches by tier, under each switch the
nodes cabled to it, and the state and load of every link on the way. Five queries, whatever the
fleet's size.

Link state comes from the inventory (``link_state`` of node and switch ports, kept current by the
agents' port events): **up** is active, **down** is down, initializing or polling (no traffic
passes), **unknown** is what an inventory without state says. Load comes from telemetry: the caller
hands over each port's reading now (``PortLoads``, apps/telemetry/links.py), which are summed here
over the cabled ports, read once for their state and rate. Nodes are read per switch already
counted in the database, one row per node under each switch.

Utilization of a link is its busier direction's share of its rate: max(tx, rx) / rate, since a
full-duplex link saturates one direction at a time. For a node or a switch it is the same over all
its node links that reported: max(Σ tx, Σ rx) / Σ rate.

Closer in, one node's NVLink matrix with ``nvidia-smi topo -m``'s labels and one port's path up the
fabric as hops to read. The models answer with structured data (``NvLink.objects.grid_of``,
``trace_port``); the words and labels people read are made here, for the API and the dashboard alike.
"""

import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypedDict

from django.db.models import Count, F, Model, Q, QuerySet, Sum

from apps.inventory.choices import FabricKind, LinkState, SwitchTier
from apps.inventory.models import Fabric, NetworkPort, Node, NvLink, Switch, SwitchPort
from apps.inventory.models.fabric import TIER_RANK, trace_port

UP, DOWN, UNKNOWN = "up", "down", "unknown"
CabledKey = tuple[int, int]  # switch, node: a node as it sits under one switch


def natural_key(name: str) -> list[int | str]:
    """Sorts leaf-9 before leaf-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def link_condition(state: str) -> str:
    if state == LinkState.ACTIVE:
        return UP
    return UNKNOWN if state == LinkState.UNKNOWN else DOWN


@dataclass
class LinkLoad:
    """Traffic over some links against their rate; ``links`` counts those that reported."""

    tx_gbps: float = 0.0
    rx_gbps: float = 0.0
    rate_gbps: float = 0.0
    links: int = 0

    def add(self, tx_gbps: float | None, rx_gbps: float | None, rate_gbps: float) -> None:
        self.tx_gbps += tx_gbps or 0.0
        self.rx_gbps += rx_gbps or 0.0
        self.rate_gbps += rate_gbps
        self.links += 1

    def __iadd__(self, other: "LinkLoad") -> "LinkLoad":
        self.tx_gbps += other.tx_gbps
        self.rx_gbps += other.rx_gbps
        self.rate_gbps += other.rate_gbps
        self.links += other.links
        return self

    @property
    def utilization(self) -> float | None:
        """The busier direction's share of the rate, 0 to 1; None when no link reported."""
        if not self.links or not self.rate_gbps:
            return None
        return max(self.tx_gbps, self.rx_gbps) / self.rate_gbps

    @property
    def percent(self) -> int | None:
        share = self.utilization
        return None if share is None else round(min(share, 1.0) * 100)


@dataclass
class LinkCounts:
    """Links by condition (up, down, unknown) and their total rate."""

    states: Counter[str] = field(default_factory=Counter)
    gbps: int = 0

    @property
    def up(self) -> int:
        return self.states[UP]

    @property
    def down(self) -> int:
        return self.states[DOWN]

    @property
    def unknown(self) -> int:
        return self.states[UNKNOWN]

    @property
    def total(self) -> int:
        return self.states.total()


@dataclass
class CabledNode:
    """A node under a switch: its ports cabled to that switch by condition, those not up by name
    (``mlx5_1/1: down``), and the load of those that reported (``Topology.add_loads``)."""

    id: int
    hostname: str
    lifecycle: str
    liveness: str
    links: LinkCounts = field(default_factory=LinkCounts)
    not_up: list[str] = field(default_factory=list)
    load: LinkLoad = field(default_factory=LinkLoad)

    @property
    def summary(self) -> str:
        """What hovering over the node says: its state, its links that are not up, its traffic (built
        here rather than in the template, which would loop over 8,000 ports at the 1,000-node scale)."""
        lines = [f"{self.hostname} ({self.liveness}, {self.lifecycle})", *self.not_up]
        load = self.load
        if load.links:
            lines.append(f"tx {load.tx_gbps:.1f} Gb/s, rx {load.rx_gbps:.1f} Gb/s of {load.rate_gbps:.0f} Gb/s")
        else:
            lines.append("no recent port sample")
        return "\n".join(lines)


@dataclass
class SwitchView:
    id: int
    name: str
    tier: str
    model: str
    rack: str | None
    uplinks: LinkCounts = field(default_factory=LinkCounts)  # to switches of a higher tier
    downlinks: LinkCounts = field(default_factory=LinkCounts)  # to nodes and lower tiers
    nodes: list[CabledNode] = field(default_factory=list)

    @property
    def tier_label(self) -> str:
        return SwitchTier(self.tier).label

    @property
    def load(self) -> LinkLoad:
        """Its node links' load (switch-to-switch links report no traffic)."""
        total = LinkLoad()
        for node in self.nodes:
            total += node.load
        return total

    @property
    def node_links(self) -> LinkCounts:
        counts = LinkCounts()
        for node in self.nodes:
            node_counts = node.links
            counts.states.update(node_counts.states)
            counts.gbps += node_counts.gbps
        return counts


@dataclass
class FabricView:
    id: int
    name: str
    kind: str
    topology: str
    cluster: str
    oversubscription: Decimal
    description: str
    tiers: list[tuple[str, list[SwitchView]]] = field(default_factory=list)  # highest tier first
    nvlinks: LinkCounts | None = None  # NVLink fabrics: the cluster's in-chassis links

    @property
    def kind_label(self) -> str:
        return FabricKind(self.kind).label

    @property
    def switch_count(self) -> int:
        return sum(len(switches) for _, switches in self.tiers)


@dataclass
class Topology:
    fabrics: list[FabricView]
    uncabled: list[tuple[int, str]]  # nodes cabled to no switch: (id, hostname)

    @property
    def is_empty(self) -> bool:
        return not self.fabrics


PortKey = tuple[int, str, int]  # node, device, port number
# A port's reading now: tx, rx and rate in Gb/s (None: not reported; a rate of None or 0 is the
# inventory's). The caller hands them over (apps/telemetry/links.py): inventory reads no telemetry.
PortLoads = Mapping[PortKey, tuple[float | None, float | None, float | None]]


def cabled_node_ports() -> QuerySet[NetworkPort]:
    """Node ports cabled to a switch: the links whose load the topology shows."""
    return NetworkPort.objects.filter(_peer_switch_port__isnull=False)


def fabric_overview(loads: PortLoads | None = None) -> Topology:
    """Every fabric, its switches by tier, the nodes under each switch, link states, and with ``loads``
    each node's load: six queries (seven with an NVLink fabric)."""
    fabrics = {
        f.pk: FabricView(
            id=f.pk,
            name=f.name,
            kind=f.kind,
            topology=f.get_topology_display(),
            cluster=f.cluster.name,
            oversubscription=f.oversubscription_ratio,
            description=f.description,
        )
        for f in Fabric.objects.select_related("cluster").order_by("cluster__name", "name")
    }
    switches: dict[int, SwitchView] = {}
    by_fabric: dict[int, dict[str, list[SwitchView]]] = defaultdict(lambda: defaultdict(list))
    for row in Switch.objects.values("id", "name", "tier", "model", "fabric_id", "rack__name").order_by():
        switch = SwitchView(row["id"], row["name"], row["tier"], row["model"], row["rack__name"])
        switches[switch.id] = switch
        by_fabric[row["fabric_id"]][switch.tier].append(switch)
    for fabric_id, tiers in by_fabric.items():
        ordered = sorted(tiers, key=lambda tier: -TIER_RANK[SwitchTier(tier)])
        fabrics[fabric_id].tiers = [
            (SwitchTier(tier).label, sorted(tiers[tier], key=lambda switch: natural_key(switch.name)))
            for tier in ordered
        ]

    _count_switch_links(switches)
    _cable_nodes(switches, loads)
    _count_nvlinks([f for f in fabrics.values() if f.kind == FabricKind.NVLINK])
    uncabled = list(
        Node.objects.exclude(ports___peer_switch_port__isnull=False).order_by("hostname").values_list("id", "hostname")
    )
    return Topology(list(fabrics.values()), uncabled)


def _count_switch_links(switches: dict[int, SwitchView]) -> None:
    """Each switch's cabled ports, up towards higher tiers or down towards nodes and lower ones: one query."""
    rows = (
        SwitchPort.objects.filter(_link__isnull=False)
        .values("switch_id", "link_state", peer_tier=F("_peer_switch_port__switch__tier"))
        .annotate(n=Count("id"), gbps=Sum("rate_gbps"))
        .order_by()
    )
    for row in rows:
        switch = switches[row["switch_id"]]
        peer = row["peer_tier"]
        upwards = peer is not None and TIER_RANK[SwitchTier(peer)] > TIER_RANK[SwitchTier(switch.tier)]
        counts = switch.uplinks if upwards else switch.downlinks
        counts.states[link_condition(row["link_state"])] += row["n"]
        counts.gbps += row["gbps"]


def _cable_nodes(switches: dict[int, SwitchView], loads: PortLoads | None) -> None:
    """Put each node under the switches its ports are cabled to, with those ports counted by condition
    and, with ``loads``, the load of those that reported summed: two queries, one row per node and
    switch, and one per cabled port (its state and its rate, which a reading without one falls back to)."""
    nodes: dict[CabledKey, CabledNode] = {}
    rows = (
        cabled_node_ports()
        .values_list("_peer_switch_port__switch_id", "node_id", "node__hostname", "node__lifecycle", "node__liveness")
        .annotate(
            up=Count("pk", filter=Q(link_state=LinkState.ACTIVE)),
            unknown=Count("pk", filter=Q(link_state=LinkState.UNKNOWN)),
            total=Count("pk"),
            gbps=Sum("rate_gbps"),
        )
        .order_by("node__hostname", "_peer_switch_port__switch_id")
    )
    for switch_id, node_id, hostname, lifecycle, liveness, up, unknown, total, gbps in rows:
        links = LinkCounts(Counter({UP: up, DOWN: total - up - unknown, UNKNOWN: unknown}), gbps)
        node = nodes[switch_id, node_id] = CabledNode(node_id, hostname, lifecycle, liveness, links)
        switches[switch_id].nodes.append(node)
    ports = (
        cabled_node_ports()
        .values_list("_peer_switch_port__switch_id", "node_id", "device_name", "port_num", "link_state", "rate_gbps")
        .order_by("device_name", "port_num")
    )
    loads = loads or {}
    for switch_id, node_id, device, number, state, inventory_rate in ports:
        node = nodes[switch_id, node_id]
        if state != LinkState.ACTIVE:
            node.not_up.append(f"{device}/{number}: {link_condition(state)}")
        if (reading := loads.get((node_id, device, number))) is not None:
            tx, rx, rate = reading
            node.load.add(tx, rx, rate or float(inventory_rate or 0))


def _count_nvlinks(fabrics: list[FabricView]) -> None:
    """An NVLink fabric lives inside the chassis: count its cluster's NVLinks by state (one query)."""
    if not fabrics:
        return
    by_cluster: dict[str, LinkCounts] = defaultdict(LinkCounts)
    rows = NvLink.objects.values("_node__cluster__name", "link_state").annotate(n=Count("id")).order_by()
    for row in rows:
        by_cluster[row["_node__cluster__name"]].states[link_condition(row["link_state"])] += row["n"]
    for fabric in fabrics:
        fabric.nvlinks = by_cluster[fabric.cluster]


# One node and one port -------------------------------------------------------------------------------


def topo_label(lanes: int | None, *, same_gpu: bool) -> str:
    """A cell of ``nvidia-smi topo -m``: X for the GPU itself, NV18 for 18 NVLink lanes, SYS for a pair
    that NVLink does not join (their traffic crosses the system's PCIe and CPU interconnect)."""
    if same_gpu:
        return "X"
    return f"NV{lanes}" if lanes else "SYS"


class NvLinkMatrix(TypedDict):
    gpu_indices: list[int]
    lanes: list[list[int | None]]
    bandwidth_gbs: list[list[int | None]]
    labels: list[list[str]]


def nvlink_matrix(node: Node) -> NvLinkMatrix:
    """The node's NVLinks GPU by GPU, with the labels ``nvidia-smi topo -m`` prints: two queries."""
    grid = NvLink.objects.grid_of(node)
    labels = [[topo_label(lanes, same_gpu=i == j) for j, lanes in enumerate(row)] for i, row in enumerate(grid.lanes)]
    return {"gpu_indices": grid.gpu_indices, "lanes": grid.lanes, "bandwidth_gbs": grid.bandwidth_gbs, "labels": labels}


def _hop(kind: str, row: Model, name: str, detail: str) -> dict[str, object]:
    return {"kind": kind, "id": row.pk, "name": name, "detail": detail}


def _node_port_hop(port: NetworkPort) -> dict[str, object]:
    return _hop("network_port", port, str(port), f"{port.rate_gbps} Gb/s, {port.link_state}")


def trace_hops(port: NetworkPort) -> list[dict[str, object]]:
    """The path from a node's port up the fabric as hops to read one after another: the port, its
    cable, the far end (another node's port, or a switch port and its switch), and that switch's
    uplinks. Each hop has its kind, the row's id, a name and a detail."""
    trace = trace_port(port)
    hops = [_node_port_hop(trace.port)]
    if (link := trace.link) is not None:
        hops.append(_hop("link", link, link.label or f"link {link.pk}", f"{link.status} {link.cable_type}".strip()))
    if trace.peer_port is not None:
        hops.append(_node_port_hop(trace.peer_port))
    if trace.switch_port is not None:
        switch_port, switch = trace.switch_port, trace.switch_port.switch
        hops.append(_hop("switch_port", switch_port, str(switch_port), f"{switch_port.rate_gbps} Gb/s"))
        hops.append(_hop("switch", switch, switch.name, f"{switch.tier} in {switch.fabric}"))
    for uplink in trace.uplinks:
        peer = uplink._peer_switch_port
        hops.append(_hop("uplink", uplink, f"{uplink} → {peer}", f"{peer.switch.tier}, {uplink.rate_gbps} Gb/s"))
    return hops
