"""Fabrics, switches and the links between endpoints.

Network links follow NetBox's cable model: a Link row with an A and a B termination, each one a
node's NetworkPort or a SwitchPort; a port can terminate at most one link. In-chassis NVLink is a
second kind of link (NvLink) between two GPUs of one node, with its lane count and bandwidth.
Both answer ``gbs_per_direction`` and ``is_up``, which is all the bandwidth arithmetic needs.
"""

from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from apps.inventory.choices import FabricKind, FabricTopology, LinkState, LinkStatus, SwitchTier
from apps.inventory.models.clusters import Cluster, Rack
from apps.inventory.models.nodes import Gpu, NetworkPort, Node


class Fabric(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="fabrics")
    kind = models.CharField(max_length=16, choices=FabricKind.choices)
    topology = models.CharField(max_length=16, choices=FabricTopology.choices)
    oversubscription_ratio = models.DecimalField(
        max_digits=5,
        decimal_places=2,
        default=1,
        help_text="Downlink to uplink bandwidth at the leaf: 1.00 is non-blocking, 2.00 is 2:1.",
    )
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(oversubscription_ratio__gte=1), name="fabric_oversubscription_at_least_1"
            )
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # The check constraint's rule, in words, before the database refuses it (a 409 otherwise).
        if self.oversubscription_ratio is not None and self.oversubscription_ratio < 1:
            raise ValidationError(
                {"oversubscription_ratio": "At least 1.00 (non-blocking); 2.00 means 2:1 oversubscribed."}
            )


class SwitchQuerySet(models.QuerySet["Switch"]):
    def leaves_of(self, node: Node) -> "SwitchQuerySet":
        """The switches the node's ports are cabled to."""
        return self.filter(ports___peer_network_port__node=node).distinct()


class Switch(models.Model):
    name = models.CharField(max_length=64, unique=True)
    fabric = models.ForeignKey(Fabric, on_delete=models.PROTECT, related_name="switches")
    tier = models.CharField(max_length=8, choices=SwitchTier.choices)
    model = models.CharField(max_length=64, blank=True, help_text="e.g. NVIDIA QM9700")
    rack = models.ForeignKey(Rack, on_delete=models.SET_NULL, null=True, blank=True, related_name="switches")
    management_address = models.GenericIPAddressField(null=True, blank=True)

    objects = SwitchQuerySet.as_manager()

    class Meta:
        ordering = ["fabric", "tier", "name"]
        verbose_name_plural = "switches"

    def __str__(self) -> str:
        return self.name

    def uplink_downlink_gbps(self) -> tuple[int, int]:
        """Bandwidth of connected links towards higher tiers and towards nodes or lower tiers."""
        return uplink_downlink_gbps([self])[self.pk]


TIER_RANK = {SwitchTier.LEAF: 0, SwitchTier.SPINE: 1, SwitchTier.CORE: 2}


def uplink_downlink_gbps(switches: list[Switch]) -> dict[int, tuple[int, int]]:
    """Per switch, the Gb/s of its cabled links towards higher tiers and towards nodes or lower
    tiers, for any number of switches in one query."""
    tiers = {switch.pk: switch.tier for switch in switches}
    totals = {pk: [0, 0] for pk in tiers}
    ports = SwitchPort.objects.filter(
        switch_id__in=tiers, _link__isnull=False, _link__status=LinkStatus.CONNECTED
    ).values_list("switch_id", "rate_gbps", "_peer_switch_port__switch__tier")
    for switch_id, rate, peer_tier in ports:
        upwards = peer_tier is not None and TIER_RANK[peer_tier] > TIER_RANK[tiers[switch_id]]
        totals[switch_id][0 if upwards else 1] += rate
    return {pk: (up, down) for pk, (up, down) in totals.items()}


class SwitchPort(models.Model):
    switch = models.ForeignKey(Switch, on_delete=models.CASCADE, related_name="ports")
    name = models.CharField(max_length=32, help_text="As the switch names it, e.g. '1/12' or 'p12'.")
    rate_gbps = models.PositiveIntegerField()
    link_state = models.CharField(max_length=16, choices=LinkState.choices, default=LinkState.UNKNOWN)
    _link = models.ForeignKey(
        "Link", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    _peer_switch_port = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    _peer_network_port = models.ForeignKey(
        NetworkPort, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )

    class Meta:
        ordering = ["switch", "name"]
        constraints = [models.UniqueConstraint(fields=["switch", "name"], name="switch_port_unique_name")]

    def __str__(self) -> str:
        return f"{self.switch}:{self.name}"


class LinkEnd(models.TextChoices):
    A = "A", "A"
    B = "B", "B"


class Link(models.Model):
    """A cable: between a node port and a switch port, two switch ports, or two node ports."""

    status = models.CharField(max_length=16, choices=LinkStatus.choices, default=LinkStatus.CONNECTED)
    label = models.CharField(max_length=64, blank=True)
    cable_type = models.CharField(max_length=32, blank=True, help_text="e.g. 'OSFP AOC 30m', 'DAC 2m'.")

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        ends = {t.end: t.endpoint for t in self.terminations.all()}
        return f"{ends.get(LinkEnd.A, '?')} ↔ {ends.get(LinkEnd.B, '?')}"

    def ends(self) -> tuple[NetworkPort | SwitchPort | None, NetworkPort | SwitchPort | None]:
        ends = {t.end: t.endpoint for t in self.terminations.all()}
        return ends.get(LinkEnd.A), ends.get(LinkEnd.B)

    @property
    def gbps(self) -> int:
        """A cable runs at the slower of its two ports."""
        return min((end.rate_gbps for end in self.ends() if end is not None), default=0)

    @property
    def gbs_per_direction(self) -> float:
        return self.gbps / 8

    @property
    def is_up(self) -> bool:
        return self.status == LinkStatus.CONNECTED and all(
            end is not None and end.link_state in (LinkState.ACTIVE, LinkState.UNKNOWN) for end in self.ends()
        )


class LinkTermination(models.Model):
    link = models.ForeignKey(Link, on_delete=models.CASCADE, related_name="terminations")
    end = models.CharField(max_length=1, choices=LinkEnd.choices)
    network_port = models.OneToOneField(
        NetworkPort, null=True, blank=True, on_delete=models.CASCADE, related_name="termination"
    )
    switch_port = models.OneToOneField(
        SwitchPort, null=True, blank=True, on_delete=models.CASCADE, related_name="termination"
    )

    class Meta:
        ordering = ["link", "end"]
        constraints = [
            models.UniqueConstraint(fields=["link", "end"], name="link_termination_one_per_end"),
            models.CheckConstraint(
                condition=(Q(network_port__isnull=False) & Q(switch_port__isnull=True))
                | (Q(network_port__isnull=True) & Q(switch_port__isnull=False)),
                name="link_termination_exactly_one_endpoint",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.link_id}{self.end}: {self.endpoint}"

    @property
    def endpoint(self) -> NetworkPort | SwitchPort:
        return self.network_port or self.switch_port  # type: ignore[return-value]


@dataclass(frozen=True)
class NvLinkGrid:
    """A node's GPU pairs, by position in ``gpu_indices``: the NVLink lanes between them and its
    bandwidth in GB/s (0 while the link is down); None for a pair no NVLink joins, and on the diagonal."""

    gpu_indices: list[int]
    lanes: list[list[int | None]]
    bandwidth_gbs: list[list[int | None]]


class NvLinkQuerySet(models.QuerySet["NvLink"]):
    def grid_of(self, node: Node) -> NvLinkGrid:
        """The NVLinks between the node's GPUs, pair by pair: two queries."""
        indices = list(node.gpus.order_by("index").values_list("index", flat=True))
        position = {index: i for i, index in enumerate(indices)}
        lanes: list[list[int | None]] = [[None] * len(indices) for _ in indices]
        bandwidth: list[list[int | None]] = [[None] * len(indices) for _ in indices]
        for link in self.filter(_node=node).select_related("gpu_a", "gpu_b"):
            i, j = position[link.gpu_a.index], position[link.gpu_b.index]
            lanes[i][j] = lanes[j][i] = link.lanes
            bandwidth[i][j] = bandwidth[j][i] = link.bandwidth_gbs if link.is_up else 0
        return NvLinkGrid(indices, lanes, bandwidth)


class NvLink(models.Model):
    """NVLink between two GPUs of one node, direct or through the node's NVSwitches."""

    gpu_a = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+")
    gpu_b = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+")
    lanes = models.PositiveSmallIntegerField(help_text="NVLink lanes between the pair (nvidia-smi topo: NV18 = 18).")
    bandwidth_gbs = models.PositiveIntegerField(help_text="Total bandwidth between the pair, both directions, GB/s.")
    link_state = models.CharField(max_length=16, choices=LinkState.choices, default=LinkState.ACTIVE)
    _node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", editable=False)

    objects = NvLinkQuerySet.as_manager()

    class Meta:
        ordering = ["_node", "gpu_a__index", "gpu_b__index"]
        verbose_name = "NVLink"
        constraints = [
            models.UniqueConstraint(fields=["gpu_a", "gpu_b"], name="nvlink_unique_pair"),
            models.CheckConstraint(condition=Q(gpu_a__lt=models.F("gpu_b")), name="nvlink_ordered_pair"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_a} ↔ {self.gpu_b} NV{self.lanes}"

    def save(self, *args: object, **kwargs: object) -> None:
        if self.gpu_a_id and self.gpu_b_id and self.gpu_a_id > self.gpu_b_id:
            self.gpu_a, self.gpu_b = self.gpu_b, self.gpu_a
        self._node_id = self.gpu_a.node_id
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def clean(self) -> None:
        if self.gpu_a_id and self.gpu_b_id:
            if self.gpu_a_id == self.gpu_b_id:
                raise ValidationError("An NVLink joins two different GPUs.")
            if self.gpu_a.node_id != self.gpu_b.node_id:
                raise ValidationError("NVLink joins GPUs of one node; between nodes use the network fabric.")

    @property
    def gbs_per_direction(self) -> float:
        return self.bandwidth_gbs / 2

    @property
    def is_up(self) -> bool:
        return self.link_state == LinkState.ACTIVE


@dataclass
class PortTrace:
    """Where a node's port leads: its cable, and at the cable's far end either another node's port,
    or a switch port with its switch and that switch's uplinks to the next tier (the way a packet
    leaves the node). What is not reached is None (an uncabled port has only itself)."""

    port: NetworkPort
    link: Link | None = None
    peer_port: NetworkPort | None = None
    switch_port: SwitchPort | None = None
    uplinks: list[SwitchPort] = field(default_factory=list)  # each with its _peer_switch_port's switch


def trace_port(port: NetworkPort) -> PortTrace:
    """The path from a node's port up the fabric: at most four queries."""
    trace = PortTrace(port)
    if port._link_id is None:
        return trace
    trace.link = Link.objects.get(pk=port._link_id)
    if port._peer_network_port_id:
        trace.peer_port = NetworkPort.objects.select_related("node").get(pk=port._peer_network_port_id)
    elif port._peer_switch_port_id is not None:
        trace.switch_port = SwitchPort.objects.select_related("switch__fabric").get(pk=port._peer_switch_port_id)
        trace.uplinks = list(
            trace.switch_port.switch.ports.filter(_peer_switch_port__isnull=False).select_related(
                "_peer_switch_port__switch"
            )
        )
    return trace
