"""A burn-in: a run of a suite's steps on a set of nodes (apps/jobs does the running), and what it
found on each node, check by check, judged against the node type's thresholds of the day."""

from django.db import models
from django.db.models import Count, Q
from django.utils import timezone

from apps.burnin.choices import NodeState, Outcome, Trigger
from apps.burnin.models.suites import Suite
from apps.burnin.models.thresholds import ThresholdVersion
from apps.inventory.models import BurnInResult, Cluster, Node
from apps.jobs.models import Command, Run


class BurnInQuerySet(models.QuerySet["BurnIn"]):
    def with_counts(self) -> "BurnInQuerySet":
        """Each burn-in with its nodes counted by state and outcome: one query."""
        by_state = {f"{state}_count": Count("nodes", filter=Q(nodes__state=state)) for state in NodeState.values}
        by_outcome = {
            f"{outcome}_count": Count("nodes", filter=Q(nodes__outcome=outcome)) for outcome in Outcome.values
        }
        return self.select_related("run", "suite", "cluster").annotate(
            node_count=Count("nodes"), **by_state, **by_outcome
        )


class BurnIn(models.Model):
    run = models.OneToOneField(Run, on_delete=models.PROTECT, related_name="burn_in")
    suite = models.ForeignKey(Suite, on_delete=models.PROTECT, related_name="burn_ins")
    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="Started for a cluster."
    )
    into_service = models.BooleanField(default=True, help_text="A node that passes goes into service.")
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.REQUEST)
    actor = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = BurnInQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"burn-in #{self.pk} ({self.suite.name})"


class BurnInNode(models.Model):
    """One node of a burn-in: testing until its steps are over, then judged and moved."""

    burn_in = models.ForeignKey(BurnIn, on_delete=models.CASCADE, related_name="nodes")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="burn_ins")
    thresholds = models.ForeignKey(ThresholdVersion, on_delete=models.PROTECT, related_name="+")
    lifecycle_before = models.CharField(max_length=16, help_text="The node's lifecycle state when it started.")
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.TESTING)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True)
    reason = models.TextField(blank=True, help_text="What failed, or why it passed; the quarantine's reason.")
    judged_at = models.DateTimeField(null=True, blank=True)
    result = models.ForeignKey(BurnInResult, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["burn_in", "node__hostname"]
        constraints = [models.UniqueConstraint(fields=["burn_in", "node"], name="burnin_node_once_per_burn_in")]
        indexes = [models.Index(fields=["state"])]

    def __str__(self) -> str:
        return f"{self.node} in {self.burn_in}"


class BurnInCheck(models.Model):
    """One step of a node's burn-in, judged: the check's own verdicts and the thresholds' together."""

    burn_in_node = models.ForeignKey(BurnInNode, on_delete=models.CASCADE, related_name="checks")
    command = models.OneToOneField(Command, on_delete=models.CASCADE, related_name="+")
    sequence = models.PositiveSmallIntegerField()
    check_name = models.CharField(max_length=32)
    passed = models.BooleanField(null=True, help_text="Empty: nothing judged (skipped, no rule applies).")
    reasons = models.JSONField(default=list, help_text="Each figure that failed, or why it was not judged.")
    judged = models.JSONField(
        default=list, help_text="Each figure with the rule it was judged by: [{name, gpu, measured, ...}]."
    )
    summary = models.CharField(max_length=2000)

    class Meta:
        ordering = ["burn_in_node", "sequence"]

    def __str__(self) -> str:
        return f"{self.check_name} on {self.burn_in_node.node}: {self.summary[:60]}"
