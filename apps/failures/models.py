"""Failures (what is wrong with a node, a GPU or a port, and what to do) and straggler flags.

A failure is opened by the first sighting of a condition and collapses every repeat of it (same
node, same GPU or port, same condition, same cause) while it is open or acknowledged: ``count``
goes up and ``last_seen`` moves on. A partial unique index over that key makes a second row
impossible even when two consumers see the same XID at the same moment (recording.py catches the
loser's IntegrityError and collapses into the winner's row).

A failure with a ``cause`` is a side effect of another (XID 45 after XID 79 on the same GPU): it is
kept and counted, but it raises no alarm of its own, and resolving the cause resolves it.
"""

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models, transaction
from django.db.models import Count, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.core.events import FailureChange, FailureChanged, announce
from apps.failures import xid as catalog
from apps.failures.choices import ACTIVE_STATES, FailureKind, FailureState, Severity, StragglerMetric
from apps.inventory.models import Gpu, NetworkPort, Node


class IllegalFailureTransition(Exception):
    """Acknowledging or resolving a failure whose state does not allow it."""


# What the open-failures feed shows: open or acknowledged, and not a side effect of another failure.
IS_ALARM = Q(state__in=ACTIVE_STATES, cause__isnull=True)


class FailureQuerySet(models.QuerySet["Failure"]):
    def active(self) -> "FailureQuerySet":
        """Open or acknowledged: still being worked on."""
        return self.filter(state__in=ACTIVE_STATES)

    def alarms(self) -> "FailureQuerySet":
        return self.filter(IS_ALARM)

    def with_related(self) -> "FailureQuerySet":
        """Everything a list of failures shows, in a fixed number of queries whatever its length."""
        return self.select_related("node", "gpu", "port").annotate(
            side_effect_count=Count("side_effects", distinct=True)
        )


class Failure(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="failures")
    # The GPU and port as the agent named them; the foreign keys point at the inventory rows when the
    # inventory has them (a GPU swapped later keeps its failures, with the index they happened on).
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True, help_text="NVML index; empty: node-wide.")
    gpu = models.ForeignKey(Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="failures")
    port_name = models.CharField(max_length=64, blank=True, help_text="HCA and port, e.g. mlx5_0/1.")
    port = models.ForeignKey(NetworkPort, on_delete=models.SET_NULL, null=True, blank=True, related_name="failures")
    kind = models.CharField(max_length=16, choices=FailureKind.choices)
    code = models.CharField(max_length=32, help_text="The condition, e.g. xid-79 or row-remap-pending.")
    xid = models.PositiveSmallIntegerField(null=True, blank=True)
    severity = models.CharField(max_length=16, choices=Severity.choices)
    title = models.CharField(max_length=200)
    detail = models.TextField(blank=True, help_text="The latest sighting's own words (the driver's message, ...).")
    recommended_action = models.TextField()
    recovery_action = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, when the GPU reported one."
    )
    state = models.CharField(max_length=16, choices=FailureState.choices, default=FailureState.OPEN)
    cause = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="side_effects",
        help_text="The failure this one is a side effect of; it raises no alarm of its own.",
    )
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    count = models.PositiveIntegerField(default=1)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=150, blank=True, help_text="Username or 'system:<what>'.")
    acknowledged_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True, help_text="Username or 'system:<what>'.")
    resolved_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolution_note = models.TextField(blank=True)

    objects = FailureQuerySet.as_manager()

    class Meta:
        ordering = ["-last_seen", "-id"]
        indexes = [
            models.Index(fields=["state", "-last_seen"], name="failure_state_last_seen"),
            models.Index(fields=["node", "state"], name="failure_node_state"),
        ]
        constraints = [
            models.UniqueConstraint(
                "node",
                Coalesce("gpu_index", Value(-1)),
                "port_name",
                "code",
                Coalesce("cause", Value(0)),
                condition=Q(state__in=ACTIVE_STATES),
                name="failure_one_active_per_condition",
            )
        ]

    def __str__(self) -> str:
        where = f" gpu{self.gpu_index}" if self.gpu_index is not None else ""
        where += f" {self.port_name}" if self.port_name else ""
        return f"{self.node}{where}: {self.title}"

    @property
    def is_side_effect(self) -> bool:
        return self.cause_id is not None

    @property
    def recovery_action_text(self) -> str | None:
        return None if self.recovery_action is None else catalog.recovery_action(self.recovery_action).text

    def announce(self, change: FailureChange) -> None:
        """Tell whoever listens (apps/core/events.py) that this failure changed, once it is committed."""
        announce(FailureChanged(self.pk, self.node_id, change))

    # State changes -------------------------------------------------------------------------------
    # Each is a conditional update on the state it starts from, so two operators acting at once
    # cannot both succeed, and the loser is told what happened instead.

    def acknowledge(self, *, actor: str, user: AbstractBaseUser | None = None) -> None:
        changed = Failure.objects.filter(pk=self.pk, state=FailureState.OPEN).update(
            state=FailureState.ACKNOWLEDGED,
            acknowledged_at=timezone.now(),
            acknowledged_by=actor,
            acknowledged_by_user=user,
        )
        self._settle(changed, "acknowledged", refusal="only an open failure can be acknowledged.")

    def resolve(self, *, actor: str, user: AbstractBaseUser | None = None, note: str = "") -> int:
        """Resolve the failure and its active side effects (and theirs); returns how many side effects."""
        resolution = {
            "state": FailureState.RESOLVED,
            "resolved_at": timezone.now(),
            "resolved_by": actor,
            "resolved_by_user": user,
        }
        with transaction.atomic():
            changed = Failure.objects.filter(pk=self.pk, state__in=ACTIVE_STATES).update(
                **resolution, resolution_note=note
            )
            side_effects = self._resolve_side_effects(resolution) if changed else 0
        self._settle(changed, "resolved", refusal="there is nothing left to resolve.")
        return side_effects

    def _resolve_side_effects(self, resolution: dict[str, object]) -> int:
        """Resolve the active side effects of this failure, and theirs; returns how many."""
        resolved, causes = 0, [self.pk]
        while causes:
            effects = list(Failure.objects.active().filter(cause__in=causes).values_list("pk", flat=True))
            resolved += Failure.objects.filter(pk__in=effects).update(
                **resolution, resolution_note=f"Resolved with its cause, failure #{self.pk}."
            )
            causes = effects
        return resolved

    def _settle(self, changed: int, change: FailureChange, *, refusal: str) -> None:
        """After a state change's conditional update: the row as it now is, and the change announced;
        or, when the update matched nothing, IllegalFailureTransition saying why (``refusal``)."""
        self.refresh_from_db()
        if not changed:
            raise IllegalFailureTransition(f"{self.describe_state()}; {refusal}")
        self.announce(change)

    def describe_state(self) -> str:
        text = f"Failure #{self.pk} ({self}) is {self.get_state_display().lower()}"
        if self.state == FailureState.RESOLVED:
            text += f" (by {self.resolved_by} at {self.resolved_at:%Y-%m-%d %H:%M:%S} UTC)"
        elif self.state == FailureState.ACKNOWLEDGED:
            text += f" (by {self.acknowledged_by} at {self.acknowledged_at:%Y-%m-%d %H:%M:%S} UTC)"
        return text


class StragglerFlagQuerySet(models.QuerySet["StragglerFlag"]):
    def active(self) -> "StragglerFlagQuerySet":
        return self.filter(cleared_at__isnull=True)


class StragglerFlag(models.Model):
    """A GPU running below its siblings under load, or a node below the fleet of its node type, on one
    metric. Kept current by apps/failures/stragglers.py: raised, refreshed while it lasts, cleared when
    the GPU or node is back in line (the row stays, with ``cleared_at``, as history)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="straggler_flags")
    gpu_index = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Empty: the node as a whole, compared with its node type's fleet."
    )
    gpu = models.ForeignKey(Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="straggler_flags")
    metric = models.CharField(max_length=16, choices=StragglerMetric.choices)
    value = models.FloatField(help_text="Median over the window (for a node: the median of its GPUs' medians).")
    reference = models.FloatField(help_text="Median of the peers it is compared with.")
    deviation = models.FloatField(help_text="How far below the reference: reference − value.")
    threshold = models.FloatField(help_text="How far below counts: max(k × MAD, floor).")
    peer_count = models.PositiveSmallIntegerField(help_text="How many GPUs (or nodes) were compared.")
    window_s = models.PositiveIntegerField(help_text="Length of the window the medians cover, seconds.")
    first_flagged = models.DateTimeField()
    last_flagged = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)
    failure = models.ForeignKey(
        Failure, on_delete=models.SET_NULL, null=True, blank=True, related_name="straggler_flags"
    )

    objects = StragglerFlagQuerySet.as_manager()

    class Meta:
        ordering = ["-last_flagged", "-id"]
        constraints = [
            models.UniqueConstraint(
                "node",
                Coalesce("gpu_index", Value(-1)),
                "metric",
                condition=Q(cleared_at__isnull=True),
                name="straggler_flag_one_active",
            )
        ]

    def __str__(self) -> str:
        where = f"gpu{self.gpu_index}" if self.gpu_index is not None else "node"
        return f"{self.node} {where} {self.metric}: {self.value:g} vs {self.reference:g}"

    @property
    def is_active(self) -> bool:
        return self.cleared_at is None
