from rest_framework import serializers

from agents import protocol
from apps.gateway.choices import EnrollmentTokenState
from apps.gateway.models import DiscoveryChange, EnrollmentToken, GatewayCounter, NodeAgent, NodeCredential
from apps.inventory.api.serializers import ValidatedModelSerializer
from apps.inventory.models import Node


class EnrollmentTokenSerializer(ValidatedModelSerializer):
    key_prefix = serializers.SerializerMethodField()
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    used_by_hostname = serializers.CharField(
        source="used_by_node.hostname", read_only=True, default=None, allow_null=True
    )
    state = serializers.ChoiceField(choices=EnrollmentTokenState.choices, read_only=True)
    expires_at = serializers.DateTimeField(required=False, help_text="Defaults to 24 hours from now.")

    class Meta:
        model = EnrollmentToken
        fields = [
            "id",
            "key_prefix",
            "hostname",
            "cluster",
            "node_type",
            "note",
            "created_by",
            "created_at",
            "expires_at",
            "used_at",
            "used_by_node",
            "used_by_hostname",
            "revoked_at",
            "state",
        ]

    def get_key_prefix(self, token: EnrollmentToken) -> str:
        return f"cpe_{token.key_id}_"


class IssuedEnrollmentTokenSerializer(EnrollmentTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret. Shown once, now; give it to the installer.")

    class Meta(EnrollmentTokenSerializer.Meta):
        fields = [*EnrollmentTokenSerializer.Meta.fields, "token"]


class NodeCredentialSerializer(serializers.ModelSerializer):
    hostname = serializers.CharField(source="node.hostname", read_only=True)
    key_prefix = serializers.SerializerMethodField()
    enrollment_token = serializers.SlugRelatedField(slug_field="key_id", read_only=True, allow_null=True)
    is_usable = serializers.BooleanField(read_only=True)

    class Meta:
        model = NodeCredential
        fields = [
            "id",
            "node",
            "hostname",
            "key_prefix",
            "enrollment_token",
            "created_at",
            "revoked_at",
            "last_seen_at",
            "last_ip",
            "is_usable",
        ]

    def get_key_prefix(self, credential: NodeCredential) -> str:
        return f"cpn_{credential.key_id}_"


class NodeAgentSerializer(serializers.ModelSerializer):
    hostname = serializers.CharField(source="node.hostname", read_only=True)
    connected = serializers.BooleanField(read_only=True)

    class Meta:
        model = NodeAgent
        fields = [
            "node",
            "hostname",
            "agent_version",
            "protocol",
            "simulated",
            "host",
            "inventory_at",
            "connected",
            "connected_at",
            "disconnected_at",
            "remote_addr",
        ]


class DiscoveryChangeSerializer(serializers.ModelSerializer):
    hostname = serializers.CharField(source="node.hostname", read_only=True)

    class Meta:
        model = DiscoveryChange
        fields = ["id", "node", "hostname", "at", "kind", "subject", "detail"]


class GatewayCounterSerializer(serializers.ModelSerializer):
    hostname = serializers.CharField(
        source="node.hostname",
        read_only=True,
        default=None,
        allow_null=True,
        help_text="Empty for refused connections.",
    )

    class Meta:
        model = GatewayCounter
        fields = ["id", "node", "hostname", "code", "count", "first_at", "last_at", "last_message"]


_FACT = {"max_length": 128, "required": False, "allow_blank": True}


class EnrollRequestSerializer(serializers.Serializer):
    token = serializers.CharField(max_length=200, help_text="The enrollment token an admin created (cpe_...).")
    hostname = serializers.CharField(max_length=253, validators=Node._meta.get_field("hostname").validators)
    agent_version = serializers.CharField(**_FACT)
    simulated = serializers.BooleanField(default=False, help_text="A fleet-simulator node, not real hardware.")
    driver_version = serializers.CharField(**_FACT)
    cuda_version = serializers.CharField(**_FACT)
    kernel = serializers.CharField(**_FACT)
    os = serializers.CharField(**_FACT)
    cpu_model = serializers.CharField(**_FACT)
    cpu_count = serializers.IntegerField(min_value=1, max_value=4096, required=False)
    memory_gib = serializers.FloatField(min_value=0, max_value=1 << 20, required=False)

    HOST_FACTS = ("driver_version", "cuda_version", "kernel", "os", "cpu_model", "cpu_count", "memory_gib")

    def agent_fields(self) -> dict[str, object]:
        """The NodeAgent fields this request reports (host facts keyed as the agent's Inventory keys them)."""
        data = self.validated_data
        facts = {name: data[name] for name in self.HOST_FACTS if data.get(name) not in (None, "")}
        return {
            "agent_version": data.get("agent_version", ""),
            "simulated": data["simulated"],
            "host": {"hostname": data["hostname"], **facts},
        }


class EnrollResponseSerializer(serializers.Serializer):
    node_id = serializers.IntegerField()
    hostname = serializers.CharField()
    credential = serializers.CharField(help_text="cpn_<key id>_<secret>. Shown once; the agent stores it 0600.")
    server_ws_url = serializers.CharField(help_text="Where the agent connects, e.g. wss://cp.example.com/ws/agent.")


class SeqResetSerializer(serializers.Serializer):
    telemetry_seq = serializers.IntegerField(
        min_value=0, max_value=protocol.LARGEST, default=0, help_text="The telemetry seq stored from now on."
    )
    events_seq = serializers.IntegerField(
        min_value=0, max_value=protocol.LARGEST, default=0, help_text="The events seq stored from now on."
    )
    reason = serializers.CharField(max_length=500, help_text="Why, for the audit log.")


class SeqsSerializer(serializers.Serializer):
    telemetry = serializers.IntegerField()
    events = serializers.IntegerField()


class SeqResetResultSerializer(serializers.Serializer):
    node = serializers.IntegerField()
    hostname = serializers.CharField()
    before = SeqsSerializer()
    after = SeqsSerializer()
