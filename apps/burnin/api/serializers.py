from datetime import datetime, timedelta
from typing import Any

from django.core.validators import RegexValidator
from django.utils import timezone
from rest_framework import serializers

from apps.burnin.choices import Bound, NodeState, Outcome
from apps.burnin.models import BreakerEvent, BurnIn, BurnInCheck, BurnInNode, QuarantineBreaker, Suite, ThresholdVersion
from apps.burnin.starting import STARTS_FROM
from apps.core.api.serializers import ChoiceField, ModelSerializer
from apps.inventory.models import Cluster, Node, NodeType
from apps.jobs.api.serializers import (
    DEFAULT_DEADLINE_S,
    MAX_DEADLINE_S,
    MAX_NODES_PER_RUN,
    MAX_STEPS_PER_RUN,
    MIN_DEADLINE_S,
    NodeBriefSerializer,
    StepSerializer,
)
from apps.jobs.choices import CHECK_CHOICES

MAX_RULES = 200


class SuiteSerializer(ModelSerializer):
    steps = StepSerializer(many=True, help_text="What every node runs, in order.")

    class Meta:
        model = Suite
        fields = ["id", "name", "title", "description", "steps", "builtin", "created_at", "updated_at"]
        read_only_fields = ["id", "builtin", "created_at", "updated_at"]

    def validate_steps(self, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not steps:
            raise serializers.ValidationError("Give at least one step.")
        if len(steps) > MAX_STEPS_PER_RUN:
            raise serializers.ValidationError(f"At most {MAX_STEPS_PER_RUN} steps.")
        return steps


class BurnInCreateSerializer(serializers.Serializer):
    suite = serializers.SlugRelatedField(slug_field="name", queryset=Suite.objects.all())
    nodes = serializers.PrimaryKeyRelatedField(
        queryset=Node.objects.all(), many=True, required=False, help_text="The nodes; or give a cluster."
    )
    cluster = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Cluster.objects.all(),
        required=False,
        help_text="Every node of the cluster that can start one (new, in burn-in, quarantined or drained).",
    )
    into_service = serializers.BooleanField(
        required=False, default=True, help_text="A node that passes goes into service (a new one always does)."
    )
    deadline_s = serializers.IntegerField(
        required=False, default=DEFAULT_DEADLINE_S, min_value=MIN_DEADLINE_S, max_value=MAX_DEADLINE_S
    )
    idempotency_key = serializers.CharField(required=False, allow_null=True, default=None, max_length=128)

    def validate_deadline_s(self, seconds: int) -> datetime:
        return timezone.now() + timedelta(seconds=seconds)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        nodes, cluster = attrs.get("nodes"), attrs.get("cluster")
        if (nodes is None) == (cluster is None):
            raise serializers.ValidationError({"nodes": "Give either nodes or a cluster."})
        if cluster is not None:
            nodes = list(cluster.nodes.filter(lifecycle__in=STARTS_FROM).order_by("hostname"))
            if not nodes:
                raise serializers.ValidationError({"cluster": f"No node of {cluster} can start a burn-in now."})
        assert nodes is not None
        if not nodes:
            raise serializers.ValidationError({"nodes": "Give at least one node."})
        if len(nodes) > MAX_NODES_PER_RUN:
            raise serializers.ValidationError({"nodes": f"At most {MAX_NODES_PER_RUN} nodes a burn-in."})
        if len({node.pk for node in nodes}) != len(nodes):
            raise serializers.ValidationError({"nodes": "A node is named twice."})
        return {**attrs, "nodes": nodes}


class ThresholdBriefSerializer(serializers.ModelSerializer):
    class Meta:
        model = ThresholdVersion
        fields = ["id", "node_type", "version"]
        read_only_fields = fields


class BurnInCheckSerializer(serializers.ModelSerializer):
    check = serializers.CharField(source="check_name", read_only=True)
    node = NodeBriefSerializer(source="burn_in_node.node", read_only=True)
    burn_in = serializers.IntegerField(source="burn_in_node.burn_in_id", read_only=True)
    thresholds = ThresholdBriefSerializer(source="burn_in_node.thresholds", read_only=True)

    class Meta:
        model = BurnInCheck
        fields = ["id", "burn_in", "node", "command", "sequence", "check", "passed", "summary", "reasons", "judged",
                  "thresholds"]  # fmt: skip
        read_only_fields = fields


class BurnInNodeSerializer(ModelSerializer):
    node = NodeBriefSerializer(read_only=True)
    thresholds = ThresholdBriefSerializer(read_only=True)
    checks = serializers.SerializerMethodField(help_text="Each step judged: check, passed, summary.")

    class Meta:
        model = BurnInNode
        fields = ["id", "burn_in", "node", "state", "outcome", "reason", "lifecycle_before", "thresholds",
                  "judged_at", "result", "checks"]  # fmt: skip
        read_only_fields = fields

    def get_checks(self, row: BurnInNode) -> list[dict[str, Any]]:
        return [
            {"check": c.check_name, "sequence": c.sequence, "passed": c.passed, "summary": c.summary}
            for c in row.checks.all()
        ]


class BurnInSerializer(serializers.ModelSerializer):
    suite = serializers.CharField(source="suite.name", read_only=True)
    cluster = serializers.CharField(source="cluster.name", read_only=True, default=None, allow_null=True)
    run_state = serializers.CharField(source="run.state", read_only=True)
    node_count = serializers.IntegerField(read_only=True)
    nodes = serializers.SerializerMethodField(help_text="How many nodes are testing, passed, failed, and moved where.")

    class Meta:
        model = BurnIn
        fields = ["id", "run", "run_state", "suite", "cluster", "into_service", "trigger", "actor", "created_at",
                  "node_count", "nodes"]  # fmt: skip
        read_only_fields = fields

    def get_nodes(self, burn_in: BurnIn) -> dict[str, int]:
        names = [*NodeState.values, *Outcome.values]
        return {name: getattr(burn_in, f"{name}_count") for name in names}


class RuleSerializer(serializers.Serializer):
    check = ChoiceField(choices=CHECK_CHOICES)
    measurement = serializers.CharField(
        max_length=64, validators=[RegexValidator(r"^[a-z][a-z0-9_]*$", "A measurement's name, e.g. busbw.")]
    )
    bound = ChoiceField(choices=Bound.choices)
    value = serializers.FloatField(min_value=-1e12, max_value=1e12)
    unit = serializers.CharField(max_length=16)
    at_size_bytes = serializers.IntegerField(required=False, min_value=1, max_value=1 << 40)


class ThresholdSerializer(ModelSerializer):
    node_type = serializers.PrimaryKeyRelatedField(queryset=NodeType.objects.all())
    rules = RuleSerializer(many=True)
    note = serializers.CharField(max_length=2000, help_text="Why this version: what changed, measured where.")
    source = serializers.CharField(max_length=4000, required=False, default="")

    class Meta:
        model = ThresholdVersion
        fields = ["id", "node_type", "version", "rules", "source", "note", "created_by", "created_at"]
        read_only_fields = ["id", "version", "created_by", "created_at"]

    def validate_rules(self, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(rules) > MAX_RULES:
            raise serializers.ValidationError(f"At most {MAX_RULES} rules.")
        named = [(rule["check"], rule["measurement"]) for rule in rules]
        twice = sorted({f"{c}/{m}" for c, m in named if named.count((c, m)) > 1})
        if twice:
            raise serializers.ValidationError(f"A figure has one rule; named twice: {', '.join(twice)}.")
        return rules


class BreakerEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = BreakerEvent
        fields = ["change", "at", "actor", "reason", "detail"]
        read_only_fields = fields


class BreakerSerializer(ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    effective_percent = serializers.IntegerField(read_only=True)
    window_s_effective = serializers.SerializerMethodField()
    events = serializers.SerializerMethodField(help_text="The latest openings and closings, newest first.")

    class Meta:
        model = QuarantineBreaker
        fields = ["id", "cluster", "is_open", "opened_at", "reason", "closed_at", "closed_by", "percent",
                  "effective_percent", "window_s", "window_s_effective", "events"]  # fmt: skip
        read_only_fields = ["id", "cluster", "is_open", "opened_at", "reason", "closed_at", "closed_by"]

    def get_window_s_effective(self, breaker: QuarantineBreaker) -> int:
        return int(breaker.effective_window.total_seconds())

    def get_events(self, breaker: QuarantineBreaker) -> list[dict[str, Any]]:
        return BreakerEventSerializer(list(breaker.events.all())[:10], many=True).data


class BreakerCloseSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, help_text="What was found, and why automation may resume.")
    quarantine_withheld = serializers.BooleanField(
        required=False, default=False, help_text="Quarantine now the nodes whose quarantine the breaker withheld."
    )
