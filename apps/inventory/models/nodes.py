from datetime import datetime

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.validators import RegexValidator
from django.db import models, transaction
from django.db.models import Count
from django.utils import timezone

from apps.core.events import NodeChanged, announce
from apps.inventory.choices import GpuState, Lifecycle, LinkState, Liveness, PortKind, SwitchTier
from apps.inventory.models.burnin import BurnInResult
from apps.inventory.models.clusters import Cluster, NodeType, Rack

# Who may move a node where. Retired is final; a new node must pass burn-in before service, and every
# move into service needs a burn-in passed since the node last left service or was quarantined
# (``Node.burn_in_evidence``), or an admin's override with a reason.
LIFECYCLE_TRANSITIONS: dict[str, frozenset[str]] = {
    Lifecycle.NEW: frozenset({Lifecycle.BURN_IN, Lifecycle.QUARANTINED, Lifecycle.RETIRED}),
    Lifecycle.BURN_IN: frozenset({Lifecycle.IN_SERVICE, Lifecycle.QUARANTINED, Lifecycle.DRAINED}),
    Lifecycle.IN_SERVICE: frozenset({Lifecycle.QUARANTINED, Lifecycle.DRAINED}),
    Lifecycle.QUARANTINED: frozenset({Lifecycle.IN_SERVICE, Lifecycle.BURN_IN, Lifecycle.DRAINED, Lifecycle.RETIRED}),
    Lifecycle.DRAINED: frozenset({Lifecycle.IN_SERVICE, Lifecycle.BURN_IN, Lifecycle.QUARANTINED, Lifecycle.RETIRED}),
    Lifecycle.RETIRED: frozenset(),
}
# Taking a node out of service must say why: the reason is what the next shift reads.
REASON_REQUIRED = frozenset({Lifecycle.QUARANTINED, Lifecycle.DRAINED, Lifecycle.RETIRED})


class IllegalTransition(Exception):
    """A lifecycle change the state machine forbids, or one that lost a race with another."""


class ReasonRequired(IllegalTransition):
    """A move the node could make, asked for without the reason it needs."""


class NodeQuerySet(models.QuerySet["Node"]):
    def create_new(
        self,
        node: "Node",
        *,
        actor: str,
        reason: str,
        user: AbstractBaseUser | None = None,
        at: datetime | None = None,
    ) -> "Node":
        """Write a node that is not yet saved, with its node type's ports, and the first row of its
        lifecycle history (from nothing to its initial state): the one way every path (the API, an
        agent's enrollment, an inventory import) brings a node into the inventory.

        Auditing stays with the caller, because each path audits at its own grain: the API request
        (its middleware), the enrollment (its refusals and issued credential), the import (one
        entry for the whole document).
        """
        with transaction.atomic():
            node.save(force_insert=True)
            NodeTransition.objects.create(
                node=node,
                from_state="",
                to_state=node.lifecycle,
                actor=actor,
                user=user,
                reason=reason,
                at=at or timezone.now(),
            )
        return node

    def named(self, key: str) -> "NodeQuerySet":
        """The node a URL names: ``nodes/12`` by its id, ``nodes/gpu-007`` by its hostname (a hostname
        of digits only is read as an id)."""
        return self.filter(pk=int(key)) if key.isascii() and key.isdigit() else self.filter(hostname=key)

    def with_related(self) -> "NodeQuerySet":
        """Everything a list of nodes shows, in a fixed number of queries whatever its length."""
        return self.select_related("cluster", "node_type", "rack").annotate(gpu_count=Count("gpus", distinct=True))

    def leaf_names(self) -> dict[int, str]:
        """Each node's leaf switch (the first by name, for a node cabled to two), by node id: one
        query. Nodes with no port cabled to a leaf are absent."""
        rows = (
            self.filter(ports___peer_switch_port__switch__tier=SwitchTier.LEAF)
            .values_list("pk", "ports___peer_switch_port__switch__name")
            .order_by("-ports___peer_switch_port__switch__name")
        )
        return dict(rows)  # the last row per node wins: the first leaf by name

    def state_counts(self) -> dict[str, dict[str, int]]:
        """How many nodes are in each lifecycle state and each liveness state: one query."""
        counts: dict[str, dict[str, int]] = {"lifecycle": {}, "liveness": {}}
        for lifecycle, liveness, number in self.values_list("lifecycle", "liveness").annotate(n=Count("pk")).order_by():
            counts["lifecycle"][lifecycle] = counts["lifecycle"].get(lifecycle, 0) + number
            counts["liveness"][liveness] = counts["liveness"].get(liveness, 0) + number
        return counts

    def under_switch(self, switch: "models.Model") -> "NodeQuerySet":
        """Nodes with at least one port cabled to this switch (for a leaf: its nodes)."""
        return self.filter(ports___peer_switch_port__switch=switch).distinct()


class Node(models.Model):
    hostname = models.CharField(
        max_length=253,
        unique=True,
        validators=[RegexValidator(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$", "Not a valid hostname.")],
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="nodes")
    node_type = models.ForeignKey(NodeType, on_delete=models.PROTECT, related_name="nodes")
    rack = models.ForeignKey(Rack, on_delete=models.SET_NULL, null=True, blank=True, related_name="nodes")
    rack_position = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Lowest rack unit the node occupies."
    )
    management_address = models.GenericIPAddressField(
        null=True, blank=True, help_text="BMC or management network address."
    )
    serial = models.CharField(max_length=64, blank=True)
    lifecycle = models.CharField(max_length=16, choices=Lifecycle.choices, default=Lifecycle.NEW, editable=False)
    lifecycle_changed_at = models.DateTimeField(default=timezone.now, editable=False)
    liveness = models.CharField(max_length=16, choices=Liveness.choices, default=Liveness.UNKNOWN, editable=False)
    last_seen_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["hostname"]
        indexes = [models.Index(fields=["lifecycle"]), models.Index(fields=["liveness"])]

    def __str__(self) -> str:
        return self.hostname

    def save(self, *args: object, **kwargs: object) -> None:
        creating = self._state.adding
        with transaction.atomic():
            super().save(*args, **kwargs)  # type: ignore[arg-type]
            if creating:
                self.instantiate_ports()

    def instantiate_ports(self) -> list["NetworkPort"]:
        """Create the ports the node type's templates describe (skipping any that exist)."""
        ports = [
            NetworkPort(node=self, device_name=t.device_name, port_num=t.port_num, kind=t.kind, rate_gbps=t.rate_gbps)
            for t in self.node_type.port_templates.all()
        ]
        return NetworkPort.objects.bulk_create(ports, ignore_conflicts=True)

    # Lifecycle ---------------------------------------------------------------------------------

    def allowed_transitions(self) -> frozenset[str]:
        return LIFECYCLE_TRANSITIONS[self.lifecycle]

    def burn_in_due_since(self) -> datetime | None:
        """Since when a burn-in must have passed for the node to go into service: the last time it
        left service or was quarantined (a pass from before the suspicion proves nothing); None for
        a node that has done neither (any pass counts)."""
        left = self.transitions.filter(
            models.Q(from_state=Lifecycle.IN_SERVICE) | models.Q(to_state=Lifecycle.QUARANTINED)
        )
        return left.aggregate(at=models.Max("at"))["at"]

    def burn_in_evidence(self) -> BurnInResult | None:
        """The newest burn-in the node passed since ``burn_in_due_since``: what lets it into service."""
        return self.burn_in_results.passes().since(self.burn_in_due_since()).first()

    def service_refusal(self) -> str | None:
        """Why the node may not go into service now without an admin's override; None when it may."""
        if self.burn_in_evidence() is not None:
            return None
        since = self.burn_in_due_since()
        when = "" if since is None else f" since it was last taken out of service ({since:%Y-%m-%d %H:%M} UTC)"
        return f"{self.hostname} has not passed a burn-in{when}: run one, or an admin may override with a reason."

    def transition(
        self,
        to: str,
        *,
        actor: str,
        user: "AbstractBaseUser | None" = None,
        reason: str = "",
        override_burn_in: bool = False,
    ) -> "NodeTransition":
        """Move the node to another lifecycle state, or raise IllegalTransition saying why not.

        Into service it needs a passed burn-in (``burn_in_evidence``), which the history row names;
        without one, ``override_burn_in`` (the caller checks that an admin asks) puts it there with
        a reason, and the row says it was an override.

        The change is a conditional update on the state we read, so two operators acting at the
        same moment cannot both succeed from the same starting state.
        """
        to = Lifecycle(to)
        current = Lifecycle(self.lifecycle)
        if to not in LIFECYCLE_TRANSITIONS[current]:
            allowed = (
                ", ".join(sorted(Lifecycle(s).label.lower() for s in LIFECYCLE_TRANSITIONS[current]))
                or "nothing (final state)"
            )
            raise IllegalTransition(
                f"{self.hostname} is {current.label.lower()} and cannot become {to.label.lower()}; "
                f"from {current.label.lower()} it can become: {allowed}."
            )
        reason = reason.strip()
        if to in REASON_REQUIRED and not reason:
            raise ReasonRequired(f"A reason is required to make {self.hostname} {to.label.lower()}.")
        evidence, overridden = self._service_gate(to, reason, override_burn_in)
        now = timezone.now()
        with transaction.atomic():
            changed = Node.objects.filter(pk=self.pk, lifecycle=current).update(
                lifecycle=to, lifecycle_changed_at=now, updated_at=now
            )
            if not changed:
                raise IllegalTransition(
                    f"{self.hostname} changed state while this request was in flight; reload and retry."
                )
            record = NodeTransition.objects.create(
                node=self,
                from_state=current,
                to_state=to,
                actor=actor,
                user=user,
                reason=reason,
                at=now,
                burn_in=evidence,
                burn_in_override=overridden,
            )
        self.lifecycle, self.lifecycle_changed_at = to, now
        announce(NodeChanged(self.pk, "lifecycle"))
        return record

    def _service_gate(self, to: str, reason: str, override: bool) -> tuple[BurnInResult | None, bool]:
        """(the burn-in that lets the node into service, whether an override does instead); nothing
        for a move elsewhere; IllegalTransition for a move into service that neither allows."""
        if to != Lifecycle.IN_SERVICE:
            return None, False
        evidence = self.burn_in_evidence()
        if evidence is not None:
            return evidence, False
        if not override:
            raise IllegalTransition(self.service_refusal())
        if not reason:
            raise ReasonRequired(f"A reason is required to put {self.hostname} into service without a burn-in.")
        return None, True

    # Topology ----------------------------------------------------------------------------------

    def siblings_under_leaf(self) -> NodeQuerySet:
        """Other nodes sharing a leaf switch with this one: the natural peer group to compare."""
        return (
            Node.objects.filter(ports___peer_switch_port__switch__ports___peer_network_port__node=self)
            .exclude(pk=self.pk)
            .distinct()
        )


class NodeTransition(models.Model):
    """One lifecycle change: the history an ops engineer reads before touching a node."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="transitions")
    from_state = models.CharField(max_length=16, choices=Lifecycle.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=Lifecycle.choices)
    at = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=150, help_text="Username or 'system:<what>' at the time.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    burn_in = models.ForeignKey(
        BurnInResult,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Into service: the passed burn-in that allowed it.",
    )
    burn_in_override = models.BooleanField(
        default=False, help_text="Into service without a passed burn-in, on an admin's override (the reason says why)."
    )

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.node} {self.from_state or '∅'} → {self.to_state}"


class Gpu(models.Model):
    uuid = models.CharField(
        max_length=64,
        unique=True,
        validators=[
            RegexValidator(
                r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
                "Not an NVML GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx).",
            )
        ],
    )
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField(help_text="NVML device index on the node.")
    model = models.CharField(max_length=64, blank=True)
    serial = models.CharField(max_length=64, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    pci_bus_id = models.CharField(
        max_length=32,
        blank=True,
        validators=[
            RegexValidator(
                r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$", "Not a PCI bus id (0000:18:00.0)."
            )
        ],
    )
    state = models.CharField(max_length=16, choices=GpuState.choices, default=GpuState.HEALTHY)
    missing_since = models.DateTimeField(
        null=True, blank=True, help_text="When its node's agent stopped reporting it; empty while it is reported."
    )
    slowdown_temp_c = models.FloatField(
        null=True, blank=True, help_text="Where the GPU starts slowing its clocks for heat, °C, as its agent reports."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node", "index"]
        verbose_name = "GPU"
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node")]
        # Every inventory looks up the serials it reports on other nodes (apps/gateway/identity.py).
        indexes = [models.Index(fields=["serial"], name="gpu_serial")]

    def __str__(self) -> str:
        return f"{self.node}/gpu{self.index}"


class NetworkPort(models.Model):
    """One port of an HCA or NIC (``mlx5_0`` port 1). Columns starting with ``_`` are derived from
    its link when the link changes (see signals.py), so "where does this port go" is one query."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="ports")
    device_name = models.CharField(max_length=32, help_text="e.g. mlx5_0")
    port_num = models.PositiveSmallIntegerField(default=1)
    kind = models.CharField(max_length=16, choices=PortKind.choices)
    rate_gbps = models.PositiveIntegerField(help_text="Negotiated rate, Gb/s.")
    link_state = models.CharField(max_length=16, choices=LinkState.choices, default=LinkState.UNKNOWN)
    guid = models.CharField(
        max_length=32,
        blank=True,
        validators=[
            RegexValidator(r"^(0x)?[0-9a-fA-F]{16}$|^([0-9a-fA-F]{4}:){3}[0-9a-fA-F]{4}$", "Not a 64-bit GUID.")
        ],
    )
    mac = models.CharField(
        max_length=17,
        blank=True,
        validators=[RegexValidator(r"^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$", "Not a MAC address (aa:bb:cc:dd:ee:ff).")],
    )
    _link = models.ForeignKey(
        "Link", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    _peer_switch_port = models.ForeignKey(
        "SwitchPort",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="_peer_network_ports",
        editable=False,
    )
    _peer_network_port = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )

    class Meta:
        ordering = ["node", "device_name", "port_num"]
        constraints = [models.UniqueConstraint(fields=["node", "device_name", "port_num"], name="network_port_unique")]
        # Every inventory looks up the GUIDs it reports on other nodes (apps/gateway/identity.py).
        indexes = [models.Index(fields=["guid"], name="network_port_guid")]

    def __str__(self) -> str:
        return f"{self.node}:{self.device_name}/{self.port_num}"

    @property
    def is_up(self) -> bool:
        return self.link_state == LinkState.ACTIVE
