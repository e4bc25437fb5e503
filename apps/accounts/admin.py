from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.accounts.audit import describe
from apps.accounts.models import ApiToken, AuditLogEntry, FailureCounter, User


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    list_display = ["username", "email", "role", "is_active", "is_superuser", "last_login"]
    list_filter = ["role", "is_active", "is_superuser"]
    fieldsets = [*DjangoUserAdmin.fieldsets, ("Control plane", {"fields": ["role"]})]
    add_fieldsets = [*DjangoUserAdmin.add_fieldsets, ("Control plane", {"fields": ["role"]})]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "role", "key_id", "created_at", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["role"]
    search_fields = ["name", "key_id", "user__username"]
    readonly_fields = ["key_id", "created_at", "last_used_at", "last_used_ip"]
    fields = [
        "user",
        "name",
        "role",
        "key_id",
        "expires_at",
        "revoked_at",
        "created_at",
        "last_used_at",
        "last_used_ip",
    ]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # issued through the API or `manage.py create_api_token`, which show the secret once

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        # A credential stays with the account it was issued to.
        return [*self.readonly_fields, "user"] if obj is not None else list(self.readonly_fields)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = [token for token in queryset.select_related("user") if token.revoked_at is None]
        for token in revoked:
            token.revoke()
        describe(request, "api_token.revoke", tokens=[f"{token} of {token.user.username}" for token in revoked])


@admin.register(AuditLogEntry)
class AuditLogEntryAdmin(admin.ModelAdmin):
    list_display = ["timestamp", "actor", "action", "status_code", "count", "object_repr", "remote_addr"]
    list_filter = ["method", "status_code"]
    search_fields = ["actor", "action", "object_repr", "path"]
    date_hierarchy = "timestamp"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(FailureCounter)
class FailureCounterAdmin(admin.ModelAdmin):
    """Who is locked out of signing in or enrolling, and who is close to it. Deleting a row unlocks its key."""

    list_display = ["scope", "key", "failures", "window_started_at", "locked_until"]
    list_filter = ["scope"]
    search_fields = ["key"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
