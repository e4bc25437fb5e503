from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.serializers import ValidatedModelSerializer
from apps.costs.models import EnergyPrice, GpuPrice, PricePeriod
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Cluster, NodeType


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "example": {"purchase_price_per_node": "250000.00", "life_years": "4.00", "gpus_per_node": 8},
    }
)
class FigureInputsField(serializers.Field):
    """The inputs of a figure by name: decimals as exact strings (like every money field), counts as integers."""

    def to_representation(self, value: dict[str, Decimal | int | str]) -> dict[str, str | int]:
        return {name: format(v, "f") if isinstance(v, Decimal) else v for name, v in value.items()}


class CostFigureSerializer(serializers.Serializer):
    value = serializers.DecimalField(max_digits=None, decimal_places=4)
    unit = serializers.CharField(help_text="Currency per GPU-hour, or per hour.")
    formula = serializers.CharField(help_text="The arithmetic in the numbers used: (250000 / 4 + 20000) / 8766 / 8.")
    inputs = FigureInputsField()
    source = serializers.CharField(help_text="The price-book rows the figure comes from.")


class GpuPriceSerializer(ValidatedModelSerializer):
    node_type_name = serializers.CharField(source="node_type.name", read_only=True)
    hourly_cost_per_gpu = CostFigureSerializer(
        read_only=True, help_text="Per GPU-hour: the hourly price, or the amortised figure for owned hardware."
    )

    class Meta:
        model = GpuPrice
        fields = [
            "id",
            "node_type",
            "node_type_name",
            "kind",
            "hourly_price_per_gpu",
            "purchase_price_per_node",
            "life_years",
            "yearly_operating_cost_per_node",
            *PricePeriod.PERIOD_FIELDS,
            "hourly_cost_per_gpu",
            "created_at",
            "updated_at",
        ]


class EnergyPriceSerializer(ValidatedModelSerializer):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    cost_per_kw_hour = CostFigureSerializer(
        read_only=True, help_text="What 1 kW of IT load costs per hour, facility overhead included."
    )

    class Meta:
        model = EnergyPrice
        fields = [
            "id",
            "cluster",
            "cluster_name",
            "price_per_kwh",
            "pue",
            *PricePeriod.PERIOD_FIELDS,
            "cost_per_kw_hour",
            "created_at",
            "updated_at",
        ]


# Query parameters of the computed endpoints -------------------------------------------------


class AtQuerySerializer(serializers.Serializer):
    at = serializers.DateField(required=False, help_text="Date whose prices apply (YYYY-MM-DD); default today (UTC).")


class GpuHourQuerySerializer(AtQuerySerializer):
    node_type = serializers.PrimaryKeyRelatedField(queryset=NodeType.objects.all(), help_text="Node type id.")


class EnergyHourQuerySerializer(AtQuerySerializer):
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.all(), help_text="Cluster id.")
    watts = serializers.DecimalField(
        max_digits=None,
        decimal_places=None,
        min_value=Decimal(0),
        max_value=Decimal(10**9),
        help_text="IT load in watts (what the nodes draw), up to 1 GW.",
    )


# Computed answers -----------------------------------------------------------------------------


class NodeTypeRateSerializer(serializers.Serializer):
    node_type_id = serializers.IntegerField()
    node_type = serializers.CharField()
    gpus_per_node = serializers.IntegerField()
    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    nodes_by_state = serializers.DictField(child=serializers.IntegerField(), help_text="Nodes per lifecycle state.")
    price_per_gpu_hour = CostFigureSerializer(allow_null=True, help_text="Null when no price is in force.")
    rate = CostFigureSerializer(allow_null=True, help_text="GPUs × price per GPU-hour; null when no price is in force.")


class ClusterCostRateSerializer(serializers.Serializer):
    cluster_id = serializers.IntegerField()
    cluster = serializers.CharField()
    at = serializers.DateField()
    counted_states = serializers.ListField(
        child=serializers.ChoiceField(choices=Lifecycle.choices),
        help_text="Lifecycle states whose nodes cost money (all but retired).",
    )
    total = CostFigureSerializer(
        allow_null=True, help_text="Per hour; null when nothing is priced or prices are in several currencies."
    )
    complete = serializers.BooleanField(help_text="False when a node type counted has no price in force.")
    breakdown = NodeTypeRateSerializer(many=True)
    notes = serializers.ListField(child=serializers.CharField())
