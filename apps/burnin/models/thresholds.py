"""Thresholds per node type, versioned: a version is never changed once published, an admin's edit is a
new version, and every judged check names the version it was judged by. A node type's first version is
made, when first needed, from the defaults of its GPU model (apps/burnin/defaults.py)."""

from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import Max

from apps.burnin.defaults import defaults_for
from apps.inventory.models import NodeType

DEFAULTS_ACTOR = "system:burnin"


class ThresholdQuerySet(models.QuerySet["ThresholdVersion"]):
    def current(self, node_type: NodeType) -> "ThresholdVersion":
        """The newest version for the node type; its first, from the GPU model's defaults, when none is."""
        newest = self.filter(node_type=node_type).order_by("-version").first()
        if newest is not None:
            return newest
        defaults = defaults_for(node_type.gpu_model)
        return self.publish(
            node_type,
            rules=list(defaults.rules),
            source=defaults.source,
            note=f"Defaults for {defaults.label}.",
            actor=DEFAULTS_ACTOR,
        )

    def publish(
        self, node_type: NodeType, *, rules: list[dict[str, Any]], source: str, note: str, actor: str
    ) -> "ThresholdVersion":
        """A new version for the node type, numbered after the newest (two at once: one retries)."""
        for _ in range(3):
            number = (self.filter(node_type=node_type).aggregate(n=Max("version"))["n"] or 0) + 1
            try:
                with transaction.atomic():
                    return self.create(
                        node_type=node_type, version=number, rules=rules, source=source, note=note, created_by=actor
                    )
            except IntegrityError:
                continue
        raise IntegrityError(f"Could not number a new threshold version for {node_type}.")


class ThresholdVersion(models.Model):
    node_type = models.ForeignKey(NodeType, on_delete=models.CASCADE, related_name="burn_in_thresholds")
    version = models.PositiveIntegerField(editable=False)
    rules = models.JSONField(
        editable=False,
        help_text="[{check, measurement, bound: at_least|at_most, value, unit, at_size_bytes?}]",
    )
    source = models.TextField(blank=True, editable=False, help_text="Where the values come from.")
    note = models.TextField(blank=True, editable=False, help_text="Why this version was published.")
    created_by = models.CharField(max_length=150, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ThresholdQuerySet.as_manager()

    class Meta:
        ordering = ["node_type", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["node_type", "version"], name="burnin_threshold_one_number_per_version")
        ]

    def __str__(self) -> str:
        return f"{self.node_type} thresholds v{self.version}"

    def rules_by_measurement(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {(rule["check"], rule["measurement"]): rule for rule in self.rules}
