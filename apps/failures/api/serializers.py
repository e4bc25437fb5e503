from rest_framework import serializers

from apps.failures import xid as catalog
from apps.failures.choices import Severity, XidCategory
from apps.failures.models import Failure, StragglerFlag


class FailureSerializer(serializers.ModelSerializer):
    hostname = serializers.CharField(source="node.hostname", read_only=True)
    gpu_uuid = serializers.CharField(source="gpu.uuid", read_only=True, default=None)
    recovery_action_text = serializers.CharField(
        read_only=True, allow_null=True, help_text="What NVML's recovery action asks for, in words."
    )
    is_side_effect = serializers.BooleanField(
        read_only=True, help_text="Linked to its cause; it raises no alarm of its own and is not in the feed."
    )
    side_effect_count = serializers.IntegerField(read_only=True, help_text="Failures linked to this one as its cause.")

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
