from rest_framework import serializers

from apps.failures import advice, reliability
from apps.failures import xid as catalog
from apps.failures.choices import FailureKind, Severity, XidCategory
from apps.failures.models import Failure, StragglerFlag
from apps.inventory.actions import LIFECYCLE_ACTIONS
from apps.inventory.choices import Lifecycle


class FailureSerializer(serializers.ModelSerializer):
    hostname = serializers.CharField(source="node.hostname", read_only=True)
    gpu_uuid = serializers.CharField(source="gpu.uuid", read_only=True, default=None, allow_null=True)
    recovery_action_text = serializers.CharField(
        read_only=True, allow_null=True, help_text="What NVML's recovery action asks for, in words."
    )
    is_side_effect = serializers.BooleanField(
        read_only=True, help_text="Linked to its cause; it raises no alarm of its own and is not in the feed."
    )
    side_effect_count = serializers.IntegerField(read_only=True, help_text="Failures linked to this one as its cause.")
    recommended_move = serializers.SerializerMethodField(
        help_text="The lifecycle state the recommended action takes the node to (drained, burn_in), or null: "
        "none. POST node-action makes the move with this failure as the reason."
    )

    class Meta:
        model = Failure
        fields = [
            "id",
            "node",
            "hostname",
            "gpu",
            "gpu_index",
            "gpu_uuid",
            "port",
            "port_name",
            "kind",
            "code",
            "xid",
            "severity",
            "title",
            "detail",
            "recommended_action",
            "recommended_move",
            "recovery_action",
            "recovery_action_text",
            "state",
            "is_side_effect",
            "cause",
            "side_effect_count",
            "first_seen",
            "last_seen",
            "count",
            "acknowledged_at",
            "acknowledged_by",
            "resolved_at",
            "resolved_by",
            "resolution_note",
        ]
        read_only_fields = fields

    def get_recommended_move(self, failure: Failure) -> Lifecycle | None:
        return advice.recommended_move(failure)


# The moves a failure can be the reason for: returning to service is never made for a failure.
FAILURE_ACTIONS = {action.name: action for action in LIFECYCLE_ACTIONS if action.target != Lifecycle.IN_SERVICE}


class NodeActionRequestSerializer(serializers.Serializer):
    action = serializers.ChoiceField(
        choices=list(FAILURE_ACTIONS), help_text="The lifecycle action to take on the failure's node."
    )
    note = serializers.CharField(
        required=False, allow_blank=True, max_length=1000, help_text="Added to the reason after the failure."
    )


class ResolveRequestSerializer(serializers.Serializer):
    note = serializers.CharField(
        required=False, allow_blank=True, max_length=4000, help_text="What was done: reset, reseated, RMA ticket, ..."
    )


class XidEntrySerializer(serializers.Serializer):
    code = serializers.IntegerField()
    name = serializers.CharField()
    title = serializers.CharField()
    severity = serializers.ChoiceField(choices=Severity.choices)
    category = serializers.ChoiceField(choices=XidCategory.choices)
    action = serializers.CharField(help_text="What to do, first and if it comes back.")
    fatal = serializers.BooleanField(help_text="The GPU needs a reset (or replacement) before it runs work again.")
    side_effects = serializers.SerializerMethodField(help_text="XIDs linked to this one when they follow it.")
    known = serializers.BooleanField(help_text="False: the catalog does not list this XID (generic entry).")

    def get_side_effects(self, entry: catalog.XidEntry) -> list[int]:
        return sorted(entry.side_effects) if entry.fatal else []


class StragglerFlagSerializer(serializers.ModelSerializer):
    hostname = serializers.CharField(source="node.hostname", read_only=True)
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = StragglerFlag
        fields = [
            "id",
            "node",
            "hostname",
            "gpu",
            "gpu_index",
            "metric",
            "value",
            "reference",
            "deviation",
            "threshold",
            "peer_count",
            "window_s",
            "first_flagged",
            "last_flagged",
            "cleared_at",
            "is_active",
            "failure",
        ]
        read_only_fields = fields


class ReliabilityQuerySerializer(serializers.Serializer):
    days = serializers.IntegerField(
        min_value=reliability.MIN_DAYS,
        max_value=reliability.MAX_DAYS,
        default=reliability.DEFAULT_DAYS,
        help_text="Length of the period, ending now, in days (the dashboard offers 7, 30, 90 and 365).",
    )


class PeriodSerializer(serializers.Serializer):
    days = serializers.IntegerField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    hours = serializers.FloatField()
    years = serializers.FloatField(help_text="days / 365.25")


LOW_EXPOSURE = (
    f"True when the figure rests on too little exposure to mean much: under {reliability.MIN_GPU_YEARS:g} "
    f"GPU-year for a rate, under {reliability.MIN_HOURS:.0f} hours for an MTBF."
)


class ModelReliabilitySerializer(serializers.Serializer):
    gpu_model = serializers.CharField(help_text="The node type's GPU model.")
    gpus = serializers.IntegerField(help_text="GPUs of this model in the fleet at some time during the period.")
    gpu_years = serializers.FloatField(
        help_text="Their exposure: each GPU's time in the fleet during the period (first seen until missing or "
        "its node's retirement), in years."
    )
    failures = serializers.IntegerField()
    failures_per_gpu_year = serializers.FloatField(allow_null=True, help_text="failures / gpu_years.")
    low_exposure = serializers.BooleanField(help_text=LOW_EXPOSURE)


class KindReliabilitySerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=FailureKind.choices)
    label = serializers.CharField()
    failures = serializers.IntegerField()
    gpu_years = serializers.FloatField(help_text="The whole fleet's exposure, which the rate rests on.")
    failures_per_gpu_year = serializers.FloatField(allow_null=True, help_text="failures / the fleet's GPU-years.")
    share = serializers.FloatField(help_text="Part of all failures in the period, 0 to 1.")
    low_exposure = serializers.BooleanField(help_text=LOW_EXPOSURE)


class NodeReliabilitySerializer(serializers.Serializer):
    node = serializers.IntegerField()
    hostname = serializers.CharField()
    gpu_model = serializers.CharField()
    gpus = serializers.IntegerField()
    hours = serializers.FloatField(help_text="The node's hours in the fleet during the period: its exposure.")
    failures = serializers.IntegerField()
    mtbf_hours = serializers.FloatField(
        allow_null=True, help_text="Mean time between failures: hours / failures; null: none."
    )
    low_exposure = serializers.BooleanField(help_text=LOW_EXPOSURE)
    kinds = serializers.DictField(child=serializers.IntegerField(), help_text="Failures by kind.")


class MinimumExposureSerializer(serializers.Serializer):
    gpu_years = serializers.FloatField(help_text="Under this, a failure rate means little.")
    hours = serializers.FloatField(help_text="Under this, an MTBF means little.")


class ReliabilitySerializer(serializers.Serializer):
    period = PeriodSerializer()
    gpus = serializers.IntegerField()
    gpu_years = serializers.FloatField(help_text="The fleet's exposure, which failures_per_gpu_year rests on.")
    failures = serializers.IntegerField(help_text="Alarms first seen in the period; side effects are not counted.")
    failures_per_gpu_year = serializers.FloatField(allow_null=True)
    low_exposure = serializers.BooleanField(help_text=LOW_EXPOSURE)
    fleet_hours = serializers.FloatField(
        help_text="Hours of the period since the fleet's first node entered it: what the fleet MTBF rests on."
    )
    fleet_mtbf_hours = serializers.FloatField(
        allow_null=True, help_text="fleet_hours / all failures: how often something fails somewhere."
    )
    fleet_mtbf_low_exposure = serializers.BooleanField(help_text=LOW_EXPOSURE)
    minimum_exposure = MinimumExposureSerializer()
    caveats = serializers.ListField(
        child=serializers.CharField(), help_text="What the figures cannot say yet (too little exposure), in words."
    )
    by_model = ModelReliabilitySerializer(many=True)
    by_kind = KindReliabilitySerializer(many=True, help_text="Kinds with at least one failure, most first.")
    worst_nodes = NodeReliabilitySerializer(many=True, help_text="Up to 10 nodes with the most failures.")
    nodes = NodeReliabilitySerializer(many=True, help_text="Every node of the fleet, most failures first.")
