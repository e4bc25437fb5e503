from django.contrib import admin

from apps.failures.models import Failure, StragglerFlag


@admin.register(Failure)
class FailureAdmin(admin.ModelAdmin):
    """Read-only: failures are opened by the control plane and changed through the API's actions,
    which keep the audit trail."""

    list_display = ["node", "gpu_index", "port_name", "title", "severity", "state", "count", "last_seen", "cause"]
    list_filter = ["state", "severity", "kind"]
    list_select_related = ["node", "cause__node"]
    search_fields = ["node__hostname", "title", "code"]
    date_hierarchy = "last_seen"
    raw_id_fields = ["node", "gpu", "port", "cause", "acknowledged_by_user", "resolved_by_user"]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: Failure | None = None) -> bool:
        return False


@admin.register(StragglerFlag)
class StragglerFlagAdmin(admin.ModelAdmin):
    list_display = ["node", "gpu_index", "metric", "value", "reference", "deviation", "last_flagged", "cleared_at"]
    list_filter = ["metric"]
    list_select_related = ["node"]
    search_fields = ["node__hostname"]
    raw_id_fields = ["node", "gpu", "failure"]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: StragglerFlag | None = None) -> bool:
        return False
