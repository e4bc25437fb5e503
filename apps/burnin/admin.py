from django.contrib import admin

from apps.burnin.models import BreakerEvent, BurnIn, BurnInCheck, BurnInNode, QuarantineBreaker, Suite, ThresholdVersion


@admin.register(Suite)
class SuiteAdmin(admin.ModelAdmin):
    list_display = ["name", "title", "builtin", "updated_at"]
    readonly_fields = ["builtin"]


@admin.register(ThresholdVersion)
class ThresholdVersionAdmin(admin.ModelAdmin):
    """Versions are read here; publishing one is the API's (``POST /api/v1/burn-in-thresholds``), which
    numbers it and audits it. A version is never edited."""

    list_display = ["node_type", "version", "created_by", "created_at"]
    list_filter = ["node_type"]
    readonly_fields = ["node_type", "version", "rules", "source", "note", "created_by", "created_at"]

    def has_add_permission(self, request: object) -> bool:
        return False


class BurnInCheckInline(admin.TabularInline):
    model = BurnInCheck
    fields = ["sequence", "check_name", "passed", "summary"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(BurnInNode)
class BurnInNodeAdmin(admin.ModelAdmin):
    list_display = ["node", "burn_in", "state", "outcome", "judged_at"]
    list_filter = ["state", "outcome"]
    readonly_fields = [f.name for f in BurnInNode._meta.fields]
    inlines = [BurnInCheckInline]


@admin.register(BurnIn)
class BurnInAdmin(admin.ModelAdmin):
    list_display = ["__str__", "suite", "cluster", "trigger", "actor", "created_at"]
    readonly_fields = [f.name for f in BurnIn._meta.fields]


class BreakerEventInline(admin.TabularInline):
    model = BreakerEvent
    fields = ["at", "change", "actor", "reason"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(QuarantineBreaker)
class QuarantineBreakerAdmin(admin.ModelAdmin):
    """Closing an open breaker is the API's (``POST .../close``, with a reason, audited)."""

    list_display = ["cluster", "is_open", "opened_at", "percent", "window_s"]
    readonly_fields = ["cluster", "is_open", "opened_at", "reason", "closed_at", "closed_by"]
    inlines = [BreakerEventInline]
