from rest_framework import serializers

from apps.core.api.serializers import ChoiceField, ModelSerializer, ValidatedModelSerializer
from apps.inventory.choices import Lifecycle
from apps.inventory.models import (
    Cluster,
    Fabric,
    Gpu,
    Link,
    LinkEnd,
    LinkTermination,
    NetworkPort,
    Node,
    NodeTransition,
    NodeType,
    NvLink,
    PortTemplate,
    Rack,
    Switch,
    SwitchPort,
)


class ClusterSerializer(ValidatedModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "description", "site", "created_at", "updated_at"]


class PortTemplateSerializer(ModelSerializer):
    class Meta:
        model = PortTemplate
        fields = ["id", "node_type", "device_name", "port_num", "kind", "rate_gbps"]


class NodeTypeSerializer(ValidatedModelSerializer):
    class Meta:
        model = NodeType
        fields = [
            "id",
            "name",
            "gpu_model",
            "gpus_per_node",
            "gpu_memory_gb",
            "peak_bf16_tflops",
            "hbm_bandwidth_gbs",
            "nvlink_bandwidth_gbs",
            "network_gbps_per_gpu",
            "gpu_power_limit_w",
            "created_at",
            "updated_at",
        ]


class RackSerializer(ValidatedModelSerializer):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = Rack
        fields = ["id", "cluster", "cluster_name", "name", "location", "power_budget_kw"]


class NodeSerializer(ValidatedModelSerializer):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    node_type_name = serializers.CharField(source="node_type.name", read_only=True)
    rack_name = serializers.CharField(source="rack.name", read_only=True, default=None, allow_null=True)
    gpu_count = serializers.IntegerField(read_only=True)
    lifecycle = ChoiceField(
        choices=Lifecycle.choices,
        default=Lifecycle.NEW,
        help_text="Initial state on create; afterwards change it with the lifecycle actions.",
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "hostname",
            "cluster",
            "cluster_name",
            "node_type",
            "node_type_name",
            "rack",
            "rack_name",
            "rack_position",
            "management_address",
            "serial",
            "lifecycle",
            "lifecycle_changed_at",
            "liveness",
            "last_seen_at",
            "gpu_count",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["lifecycle_changed_at", "liveness", "last_seen_at"]

    def validate_lifecycle(self, value: str) -> str:
        if self.instance is not None and value != self.instance.lifecycle:
            raise serializers.ValidationError(
                "Lifecycle changes go through the lifecycle actions (quarantine, drain, return-to-service, ...), "
                "which keep the history."
            )
        return value

    def validate(self, attrs: dict) -> dict:
        lifecycle = attrs.pop("lifecycle", None)
        attrs = super().validate(attrs)
        if lifecycle is not None and self.instance is None:
            attrs["lifecycle"] = lifecycle
        return attrs

    def create(self, validated_data: dict) -> Node:
        user = self.context["request"].user
        return Node.objects.create_new(
            Node(**validated_data), actor=user.get_username(), user=user, reason="created through the API"
        )


class NodeTransitionSerializer(serializers.ModelSerializer):
    hostname = serializers.CharField(source="node.hostname", read_only=True)

    class Meta:
        model = NodeTransition
        fields = [
            "id",
            "node",
            "hostname",
            "from_state",
            "to_state",
            "at",
            "actor",
            "reason",
            "burn_in",
            "burn_in_override",
        ]


class TransitionRequestSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="Why. Required to quarantine, drain or retire, and to override the burn-in.",
    )
    override_burn_in = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Return to service: go without a burn-in passed since the node last left service "
        "(admin only, with a reason; the history and the audit log record it as an override).",
    )
    suite = serializers.CharField(
        required=False,
        max_length=64,
        help_text="Start burn-in: the burn-in suite's name (default quick). The node action starts a real "
        "burn-in, as ``POST /api/v1/burn-ins`` does; nothing else takes a suite.",
    )


class GpuSerializer(ValidatedModelSerializer):
    hostname = serializers.CharField(source="node.hostname", read_only=True)

    class Meta:
        model = Gpu
        fields = [
            "id",
            "uuid",
            "node",
            "hostname",
            "index",
            "model",
            "serial",
            "memory_mib",
            "pci_bus_id",
            "state",
            "slowdown_temp_c",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["slowdown_temp_c"]  # what the GPU's agent reports


class NetworkPortSerializer(ValidatedModelSerializer):
    hostname = serializers.CharField(source="node.hostname", read_only=True)
    connected_switch = serializers.CharField(
        source="_peer_switch_port.switch.name", read_only=True, default=None, allow_null=True
    )
    connected_switch_port = serializers.CharField(
        source="_peer_switch_port.name", read_only=True, default=None, allow_null=True
    )
    link = serializers.IntegerField(source="_link_id", read_only=True, allow_null=True)

    class Meta:
        model = NetworkPort
        fields = [
            "id",
            "node",
            "hostname",
            "device_name",
            "port_num",
            "kind",
            "rate_gbps",
            "link_state",
            "guid",
            "mac",
            "link",
            "connected_switch",
            "connected_switch_port",
        ]


class FabricSerializer(ValidatedModelSerializer):
    class Meta:
        model = Fabric
        fields = ["id", "name", "cluster", "kind", "topology", "oversubscription_ratio", "description"]


class SwitchSerializer(ValidatedModelSerializer):
    fabric_name = serializers.CharField(source="fabric.name", read_only=True)

    class Meta:
        model = Switch
        fields = ["id", "name", "fabric", "fabric_name", "tier", "model", "rack", "management_address"]


class SwitchPortSerializer(ValidatedModelSerializer):
    switch_name = serializers.CharField(source="switch.name", read_only=True)
    link = serializers.IntegerField(source="_link_id", read_only=True, allow_null=True)

    class Meta:
        model = SwitchPort
        fields = ["id", "switch", "switch_name", "name", "rate_gbps", "link_state", "link"]


class LinkEndpointSerializer(serializers.Serializer):
    """One end of a cable: exactly one of a node's network port or a switch port."""

    network_port = serializers.PrimaryKeyRelatedField(
        queryset=NetworkPort.objects.all(), required=False, allow_null=True
    )
    switch_port = serializers.PrimaryKeyRelatedField(queryset=SwitchPort.objects.all(), required=False, allow_null=True)
    description = serializers.CharField(read_only=True)

    def validate(self, attrs: dict) -> dict:
        if bool(attrs.get("network_port")) == bool(attrs.get("switch_port")):
            raise serializers.ValidationError("Give exactly one of network_port or switch_port.")
        return attrs

    def to_representation(self, termination: LinkTermination) -> dict:
        return {
            "network_port": termination.network_port_id,
            "switch_port": termination.switch_port_id,
            "description": str(termination.endpoint),
        }


class LinkSerializer(serializers.ModelSerializer):
    # null only in a response, for a link whose end was removed (both are required to create one).
    a = LinkEndpointSerializer(help_text="The A end.", allow_null=True)
    b = LinkEndpointSerializer(help_text="The B end.", allow_null=True)

    class Meta:
        model = Link
        fields = ["id", "status", "label", "cable_type", "a", "b"]

    def to_representation(self, link: Link) -> dict:
        ends = {t.end: t for t in link.terminations.all()}
        data: dict = {"id": link.pk, "status": link.status, "label": link.label, "cable_type": link.cable_type}
        for end in (LinkEnd.A, LinkEnd.B):
            data[end.lower()] = LinkEndpointSerializer().to_representation(ends[end]) if end in ends else None
        return data

    def validate(self, attrs: dict) -> dict:
        ends = [attrs.get("a"), attrs.get("b")]
        if self.instance is None and None in ends:
            raise serializers.ValidationError("A link needs both ends, a and b.")
        chosen = [e.get("network_port") or e.get("switch_port") for e in ends if e]
        if len(chosen) == 2 and chosen[0] == chosen[1]:
            raise serializers.ValidationError("A link cannot join a port to itself.")
        for name, end in zip(("a", "b"), ends, strict=True):
            if not end:
                continue
            endpoint = end.get("network_port") or end.get("switch_port")
            existing = getattr(endpoint, "termination", None) if endpoint else None
            if existing is not None and (self.instance is None or existing.link_id != self.instance.pk):
                raise serializers.ValidationError({name: f"{endpoint} already terminates link {existing.link_id}."})
        return attrs

    def _set_end(self, link: Link, end: str, data: dict) -> None:
        LinkTermination.objects.filter(link=link, end=end).delete()
        LinkTermination.objects.create(
            link=link, end=end, network_port=data.get("network_port"), switch_port=data.get("switch_port")
        )

    def create(self, validated: dict) -> Link:
        a, b = validated.pop("a"), validated.pop("b")
        link = Link.objects.create(**validated)
        self._set_end(link, LinkEnd.A, a)
        self._set_end(link, LinkEnd.B, b)
        return link

    def update(self, link: Link, validated: dict) -> Link:
        ends = {LinkEnd.A: validated.pop("a", None), LinkEnd.B: validated.pop("b", None)}
        link = super().update(link, validated)
        for end, data in ends.items():
            if data:
                self._set_end(link, end, data)
        return link


class NvLinkSerializer(ValidatedModelSerializer):
    hostname = serializers.CharField(source="_node.hostname", read_only=True)
    gpu_a_index = serializers.IntegerField(source="gpu_a.index", read_only=True)
    gpu_b_index = serializers.IntegerField(source="gpu_b.index", read_only=True)

    class Meta:
        model = NvLink
        fields = [
            "id",
            "hostname",
            "gpu_a",
            "gpu_a_index",
            "gpu_b",
            "gpu_b_index",
            "lanes",
            "bandwidth_gbs",
            "link_state",
        ]


class NvLinkMatrixSerializer(serializers.Serializer):
    gpu_indices = serializers.ListField(child=serializers.IntegerField())
    lanes = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField(allow_null=True)))
    bandwidth_gbs = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField(allow_null=True)))
    labels = serializers.ListField(child=serializers.ListField(child=serializers.CharField()))


class NodeBandwidthSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    nvlink_gbs = serializers.FloatField(allow_null=True)
    nvlink_source = serializers.CharField()
    active_nics = serializers.IntegerField()
    total_nics = serializers.IntegerField()
    slowest_nic_gbps = serializers.IntegerField(allow_null=True)
    network_gbs = serializers.FloatField()
    leaf_switches = serializers.ListField(child=serializers.CharField())


class BusBandwidthQuerySerializer(serializers.Serializer):
    """Which nodes to estimate: named ones, or a cluster's nodes in service. Validated, it holds
    ``nodes``; the hostnames win when both are given."""

    hostname = serializers.ListField(
        child=serializers.CharField(allow_blank=True),
        required=False,
        help_text="Hostnames (repeat or comma-separate).",
    )
    cluster = serializers.IntegerField(required=False, help_text="Every in-service node of this cluster.")

    def validate_hostname(self, values: list[str]) -> list[str]:
        return [hostname.strip() for value in values for hostname in value.split(",") if hostname.strip()]

    def validate(self, attrs: dict) -> dict:
        if hostnames := attrs.get("hostname"):
            nodes = Node.objects.filter(hostname__in=hostnames)
            missing = sorted(set(hostnames) - set(nodes.values_list("hostname", flat=True)))
            if missing:
                raise serializers.ValidationError({"hostname": f"Unknown hostnames: {', '.join(missing)}."})
        elif "cluster" in attrs:
            cluster = Cluster.objects.filter(pk=attrs["cluster"]).first()
            if cluster is None:
                raise serializers.ValidationError({"cluster": f"No cluster has id {attrs['cluster']}."})
            nodes = cluster.nodes.filter(lifecycle=Lifecycle.IN_SERVICE)
            if not nodes.exists():
                raise serializers.ValidationError(
                    {"cluster": f"{cluster} has no node in service; name the nodes with hostname=... instead."}
                )
        else:
            raise serializers.ValidationError({"hostname": "Give hostname=... (one or more) or cluster=<id>."})
        return {"nodes": nodes}


class BusBandwidthSerializer(serializers.Serializer):
    busbw_gbs = serializers.FloatField(help_text="Theoretical all-reduce bus bandwidth, GB/s (nccl-tests' busbw).")
    limited_by = serializers.CharField(help_text="The slowest hop, which sets the figure.")
    nodes = NodeBandwidthSerializer(many=True)
    cross_leaf_factor = serializers.FloatField()
    cross_leaf_source = serializers.CharField()
    notes = serializers.ListField(child=serializers.CharField())


class TraceHopSerializer(serializers.Serializer):
    kind = serializers.CharField()
    id = serializers.IntegerField()
    name = serializers.CharField()
    detail = serializers.CharField(allow_blank=True)
