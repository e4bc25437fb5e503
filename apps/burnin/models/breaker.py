"""The automatic-quarantine circuit breaker of a cluster: automation may quarantine at most a share of
the cluster's nodes within a window; the next one opens the breaker (a critical alert: its event row,
the ``QuarantineBreakerChanged`` domain event and ``controlplane_quarantine_breaker_open``), and from
then on automation quarantines nothing in that cluster until a person closes it.

A fleet-wide "failure" is usually a bad check, a driver or the fabric: a person decides. Closing the
breaker starts a fresh window, so what was counted before the decision is not counted again.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from apps.burnin.choices import BreakerChange
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Cluster, Node, NodeTransition


class QuarantineBreaker(models.Model):
    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="quarantine_breaker")
    percent = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Of the cluster's nodes, the most automation may quarantine in a window, in per cent; "
        "empty: QUARANTINE_BREAKER_PERCENT.",
    )
    window_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="The window, in seconds; empty: QUARANTINE_BREAKER_WINDOW_S."
    )
    is_open = models.BooleanField(default=False, editable=False)
    opened_at = models.DateTimeField(null=True, blank=True, editable=False)
    reason = models.TextField(blank=True, editable=False, help_text="Why it opened.")
    closed_at = models.DateTimeField(null=True, blank=True, editable=False, help_text="Last closed by a person.")
    closed_by = models.CharField(max_length=150, blank=True, editable=False)

    class Meta:
        ordering = ["cluster__name"]

    def __str__(self) -> str:
        return f"quarantine breaker of {self.cluster} ({'open' if self.is_open else 'closed'})"

    @property
    def effective_percent(self) -> int:
        return settings.QUARANTINE_BREAKER_PERCENT if self.percent is None else self.percent

    @property
    def effective_window(self) -> timedelta:
        return timedelta(seconds=settings.QUARANTINE_BREAKER_WINDOW_S if self.window_s is None else self.window_s)

    def allowed(self) -> int:
        """How many automatic quarantines a window allows: the share of the nodes not retired, at least one."""
        return max(1, self.cluster_size() * self.effective_percent // 100)

    def cluster_size(self) -> int:
        return Node.objects.filter(cluster_id=self.cluster_id).exclude(lifecycle=Lifecycle.RETIRED).count()

    def counting_since(self, now: datetime) -> datetime:
        start = now - self.effective_window
        return max(start, self.closed_at) if self.closed_at else start

    def quarantined_in_window(self, now: datetime) -> int:
        """Automatic quarantines (by a ``system:`` actor) of the cluster's nodes within the window."""
        return NodeTransition.objects.filter(
            node__cluster_id=self.cluster_id,
            to_state=Lifecycle.QUARANTINED,
            actor__startswith="system:",
            at__gte=self.counting_since(now),
        ).count()


class BreakerEvent(models.Model):
    """The breaker's history: each opening (the alert) and each closing (the person's decision)."""

    breaker = models.ForeignKey(QuarantineBreaker, on_delete=models.CASCADE, related_name="events")
    change = models.CharField(max_length=16, choices=BreakerChange.choices)
    at = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=150)
    reason = models.TextField()
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.breaker.cluster} breaker {self.change} at {self.at:%Y-%m-%d %H:%M}"
