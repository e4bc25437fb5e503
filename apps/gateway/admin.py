from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.accounts.audit import describe
from apps.gateway.models import DiscoveryChange, EnrollmentToken, GatewayCounter, NodeAgent, NodeCredential
from apps.gateway.seqs import reset_seqs


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
    actions = ["reset_seqs"]

    @admin.action(description="Reset the stored seqs of the selected nodes to 0 (closes their sockets)")
    def reset_seqs(self, request: HttpRequest, queryset: QuerySet[NodeAgent]) -> None:
        agents = list(queryset.select_related("node"))
        before = {agent.node.hostname: reset_seqs(agent.node) for agent in agents}
        describe(request, "node.seqs_reset", before=before, after={"telemetry": 0, "events": 0}, reason="admin site")
        self.message_user(request, f"Reset the stored seqs of {len(agents)} node(s); their agents reconnect.")


@admin.register(DiscoveryChange)
class DiscoveryChangeAdmin(admin.ModelAdmin):
    list_display = ["at", "node", "kind", "subject"]
    list_filter = ["kind"]
    search_fields = ["node__hostname", "subject"]


@admin.register(GatewayCounter)
class GatewayCounterAdmin(admin.ModelAdmin):
    list_display = ["node", "code", "count", "last_at", "last_message"]
    list_filter = ["code"]
