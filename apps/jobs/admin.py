from django.contrib import admin

from apps.jobs.models import Command, Run


class CommandInline(admin.TabularInline):
    model = Command
    extra = 0
    fields = ["node", "sequence", "check_name", "state", "attempts", "outcome", "exit_code", "reason"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    """Read here; runs are started and cancelled through the API, which audits both."""

    list_display = ["id", "title", "kind", "state", "actor", "created_at", "finished_at"]
    list_filter = ["state", "kind"]
    search_fields = ["title", "actor"]
    inlines = [CommandInline]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Command)
class CommandAdmin(admin.ModelAdmin):
    list_display = ["id", "run", "node", "check_name", "state", "attempts", "sent_at", "finished_at"]
    list_filter = ["state", "check_name"]
    search_fields = ["node__hostname", "key"]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False
