from django.contrib import admin

from apps.gateway.models import DiscoveryChange, EnrollmentToken, GatewayCounter, NodeAgent, NodeCredential


@admin.register(EnrollmentToken)
class EnrollmentTokenAdmin(admin.ModelAdmin):
    """Read here; tokens are created through the API, which shows the secret once."""

    list_display = ["key_id", "hostname", "cluster", "created_by", "created_at", "expires_at", "used_at", "revoked_at"]
    search_fields = ["key_id", "hostname"]
    readonly_fields = ["key_id", "used_at", "used_by_node", "revoked_at"]

    def has_add_permission(self, request: object) -> bool:
        return False


@admin.register(NodeCredential)
class NodeCredentialAdmin(admin.ModelAdmin):
    list_display = ["key_id", "node", "created_at", "revoked_at", "last_seen_at", "last_ip"]
    search_fields = ["key_id", "node__hostname"]
    readonly_fields = ["node", "key_id", "enrollment_token", "revoked_at", "last_seen_at", "last_ip"]

    def has_add_permission(self, request: object) -> bool:
        return False


@admin.register(NodeAgent)
class NodeAgentAdmin(admin.ModelAdmin):
    list_display = ["node", "agent_version", "simulated", "connected_at", "disconnected_at", "inventory_at"]
    search_fields = ["node__hostname", "agent_version"]


@admin.register(DiscoveryChange)
class DiscoveryChangeAdmin(admin.ModelAdmin):
    list_display = ["at", "node", "kind", "subject"]
    list_filter = ["kind"]
    search_fields = ["node__hostname", "subject"]


@admin.register(GatewayCounter)
class GatewayCounterAdmin(admin.ModelAdmin):
    list_display = ["node", "code", "count", "last_at", "last_message"]
    list_filter = ["code"]
