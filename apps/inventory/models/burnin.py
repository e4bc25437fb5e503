"""Burn-in verdicts as the lifecycle sees them: the evidence that lets a node return to service.

A node goes back into service only on a burn-in it passed since it last left service or was last
quarantined (``Node.transition``); a pass from before the suspicion proves nothing about the node
now. The burn-in runs (issue 12: the run framework and its burn-in suites) record one row here per
judged run, through ``BurnInResult.objects.record``; until they do, nothing records a pass, and an
admin's override (with a reason, kept in the lifecycle history and the audit log) is the only way
back. Rows are never deleted: they are the history a reviewer reads next to the lifecycle's.
"""

from datetime import datetime

from django.db import models
from django.utils import timezone


class BurnInResultQuerySet(models.QuerySet["BurnInResult"]):
    def passes(self) -> "BurnInResultQuerySet":
        return self.filter(passed=True)

    def since(self, at: datetime | None) -> "BurnInResultQuerySet":
        """Finished at or after ``at``; every one when ``at`` is None."""
        return self if at is None else self.filter(finished_at__gte=at)

    def record(
        self, node: models.Model, *, passed: bool, run: str, summary: str = "", finished_at: datetime | None = None
    ) -> "BurnInResult":
        """The seam the burn-in runs fill: one judged run's verdict on one node (an inventory Node:
        typed as a model, since nodes.py imports this module and the models import one way)."""
        return self.create(
            node=node, passed=passed, run=run, summary=summary, finished_at=finished_at or timezone.now()
        )


class BurnInResult(models.Model):
    node = models.ForeignKey("inventory.Node", on_delete=models.CASCADE, related_name="burn_in_results")
    passed = models.BooleanField()
    finished_at = models.DateTimeField(help_text="When the run was judged.")
    run = models.CharField(max_length=100, help_text="Which run judged it, e.g. 'burn-in run #42'.")
    summary = models.TextField(blank=True, help_text="What ran and what it found, in a line or two.")

    objects = BurnInResultQuerySet.as_manager()

    class Meta:
        ordering = ["-finished_at", "-id"]
        verbose_name = "burn-in result"
        indexes = [models.Index(fields=["node", "-finished_at"], name="burn_in_result_node_finished")]

    def __str__(self) -> str:
        return f"{self.node}: {self.run} {'passed' if self.passed else 'failed'}"
