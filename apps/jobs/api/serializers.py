from datetime import timedelta
from typing import Any

import msgspec
from django.utils import timezone
from rest_framework import serializers

from agents import protocol
from agents.executors.checks import CHECKS
from agents.executors.params import ParamsError, decode_params
from apps.core.api.serializers import ChoiceField
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node
from apps.jobs.choices import CHECK_CHOICES, CommandOutcome
from apps.jobs.models import Command, CommandLogLine, Run, Step

MAX_NODES_PER_RUN = 5000
MAX_STEPS_PER_RUN = 32
MIN_DEADLINE_S, MAX_DEADLINE_S, DEFAULT_DEADLINE_S = 60, 7 * 24 * 3600, 6 * 3600
_env_type = dict[protocol.commands.EnvName, protocol.commands.EnvValue]


class StepSerializer(serializers.Serializer):
    """A check every node of the run takes, with what agents/executors accepts as its parameters
    (docs/burn-in-checks.md), checked here as the agent will check them."""

    check = ChoiceField(choices=CHECK_CHOICES)
    params = serializers.JSONField(required=False, default=dict, help_text="The check's parameters, a JSON object.")
    time_limit_s = serializers.IntegerField(
        required=False, default=600, min_value=1, max_value=protocol.MAX_TIME_LIMIT_S, help_text="On the node."
    )
    env = serializers.DictField(
        child=serializers.CharField(max_length=4096, allow_blank=True),
        required=False,
        default=dict,
        help_text=f"Environment for the check's process: only {', '.join(f'{p}_*' for p in protocol.ENV_PREFIXES)}.",
    )

    def validate_params(self, params: Any) -> dict[str, Any]:
        if not isinstance(params, dict):
            raise serializers.ValidationError("Give the parameters as a JSON object.")
        return params

    def validate_env(self, env: dict[str, str]) -> dict[str, str]:
        if len(env) > protocol.commands.MAX_ENV_VARS:
            raise serializers.ValidationError(f"At most {protocol.commands.MAX_ENV_VARS} variables.")
        try:
            return msgspec.convert(env, _env_type)
        except msgspec.ValidationError as exc:
            prefixes = ", ".join(f"{prefix}_*" for prefix in protocol.ENV_PREFIXES)
            raise serializers.ValidationError(f"{exc}: only variables named {prefixes} may be set.") from exc

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            decode_params(CHECKS[attrs["check"]].params, msgspec.json.encode(attrs["params"]))
        except (ParamsError, msgspec.EncodeError) as exc:
            raise serializers.ValidationError({"params": str(exc)}) from exc
        return attrs


class RunCreateSerializer(serializers.Serializer):
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    nodes = serializers.PrimaryKeyRelatedField(
        queryset=Node.objects.all(), many=True, help_text="The nodes; each takes every step, in order."
    )
    steps = StepSerializer(many=True)
    deadline_s = serializers.IntegerField(
        required=False,
        default=DEFAULT_DEADLINE_S,
        min_value=MIN_DEADLINE_S,
        max_value=MAX_DEADLINE_S,
        help_text="Seconds from now: what is not finished by then expires, with the reason.",
    )
    idempotency_key = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        max_length=128,
        help_text="Your key for this request: repeated with it, the request returns the run it made.",
    )

    def validate_nodes(self, nodes: list[Node]) -> list[Node]:
        if not nodes:
            raise serializers.ValidationError("Give at least one node.")
        if len(nodes) > MAX_NODES_PER_RUN:
            raise serializers.ValidationError(f"At most {MAX_NODES_PER_RUN} nodes a run.")
        if len({node.pk for node in nodes}) != len(nodes):
            raise serializers.ValidationError("A node is named twice.")
        retired = sorted(node.hostname for node in nodes if node.lifecycle == Lifecycle.RETIRED)
        if retired:
            raise serializers.ValidationError(f"Retired nodes run nothing: {', '.join(retired)}.")
        return nodes

    def validate_steps(self, steps: list[dict[str, Any]]) -> list[Step]:
        if not steps:
            raise serializers.ValidationError("Give at least one step.")
        if len(steps) > MAX_STEPS_PER_RUN:
            raise serializers.ValidationError(f"At most {MAX_STEPS_PER_RUN} steps a run.")
        return [Step(**step) for step in steps]

    def validate_deadline_s(self, seconds: int) -> Any:
        return timezone.now() + timedelta(seconds=seconds)


class NodeBriefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Node
        fields = ["id", "hostname"]
        read_only_fields = fields


class CommandCountsSerializer(serializers.Serializer):
    """How many of a run's commands are in each state."""

    pending = serializers.IntegerField(source="pending_count")
    sent = serializers.IntegerField(source="sent_count")
    running = serializers.IntegerField(source="running_count")
    succeeded = serializers.IntegerField(source="succeeded_count")
    failed = serializers.IntegerField(source="failed_count")
    cancelled = serializers.IntegerField(source="cancelled_count")
    expired = serializers.IntegerField(source="expired_count")


class RunSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None, allow_null=True)
    command_count = serializers.IntegerField(read_only=True)
    node_count = serializers.IntegerField(read_only=True)
    commands = CommandCountsSerializer(source="*", read_only=True)
    progress = serializers.SerializerMethodField(help_text="0 to 1: commands over, and the progress of those running.")

    class Meta:
        model = Run
        fields = [
            "id",
            "kind",
            "title",
            "state",
            "steps",
            "deadline",
            "idempotency_key",
            "actor",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "reason",
            "cancelled_by",
            "node_count",
            "command_count",
            "commands",
            "progress",
        ]
        read_only_fields = fields

    def get_progress(self, run: Run) -> float:
        return round(run.progress_sum / run.command_count, 4) if run.command_count else 0.0


class CommandSerializer(serializers.ModelSerializer):
    node = NodeBriefSerializer(read_only=True)
    check = serializers.CharField(source="check_name", read_only=True)
    # Declared, not derived: DRF drops a read-only field's allow_blank, and the schema would forbid "".
    outcome = ChoiceField(
        choices=CommandOutcome.choices, allow_blank=True, read_only=True, help_text="Empty until over."
    )

    class Meta:
        model = Command
        fields = [
            "id",
            "run",
            "node",
            "sequence",
            "check",
            "params",
            "env",
            "invasive",
            "time_limit_s",
            "deadline",
            "key",
            "state",
            "attempts",
            "sent_at",
            "started_at",
            "finished_at",
            "fraction",
            "step",
            "progress_message",
            "outcome",
            "exit_code",
            "reason",
            "stop_requested_at",
            "log_lines_dropped",
        ]
        read_only_fields = fields


class CommandDetailSerializer(CommandSerializer):
    class Meta(CommandSerializer.Meta):
        fields = [*CommandSerializer.Meta.fields, "result", "output"]
        read_only_fields = fields


class CancelRequestSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=1000, default="")


class LogLineSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="command.node.hostname", read_only=True)
    check = serializers.CharField(source="command.check_name", read_only=True)

    class Meta:
        model = CommandLogLine
        fields = ["id", "command", "node", "check", "at", "level", "message"]
        read_only_fields = fields


class LogQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(required=False, default=0, min_value=0, help_text="Lines after this line id.")
    limit = serializers.IntegerField(required=False, default=500, min_value=1, max_value=1000)
