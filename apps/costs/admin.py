from collections.abc import Callable

from django.contrib import admin

from apps.costs.figures import CostFigure
from apps.costs.models import EnergyPrice, GpuPrice, PricePeriod


def shown_with_formula(compute: Callable[[PricePeriod], CostFigure], description: str) -> Callable:
    """A read-only admin column: the derived figure, then the arithmetic behind it."""

    @admin.display(description=description)
    def column(self: admin.ModelAdmin, price: PricePeriod) -> str:
        if price.pk is None:
            return "Shown once saved."
        figure = compute(price)
        return f"{figure.value} {figure.unit} = {figure.formula}"

    return column


@admin.register(GpuPrice)
class GpuPriceAdmin(admin.ModelAdmin):
    list_display = ["node_type", "kind", "hourly_cost", "valid_from", "valid_to"]
    list_filter = ["kind", "node_type", "currency"]
    list_select_related = ["node_type"]
    date_hierarchy = "valid_from"
    readonly_fields = ["hourly_cost"]
    fieldsets = [
        (None, {"fields": ["node_type", "kind", *PricePeriod.PERIOD_FIELDS]}),
        ("On-demand or reserved", {"fields": ["hourly_price_per_gpu"]}),
        ("Owned hardware", {"fields": GpuPrice.OWNED_FIELDS}),
        ("Derived", {"fields": ["hourly_cost"]}),
    ]

    hourly_cost = shown_with_formula(GpuPrice.hourly_cost_per_gpu, "Cost per GPU-hour")


@admin.register(EnergyPrice)
class EnergyPriceAdmin(admin.ModelAdmin):
    list_display = ["cluster", "price_per_kwh", "pue", "kw_hour_cost", "valid_from", "valid_to"]
    list_filter = ["cluster", "currency"]
    list_select_related = ["cluster"]
    date_hierarchy = "valid_from"
    readonly_fields = ["kw_hour_cost"]
    fields = ["cluster", "price_per_kwh", "pue", *PricePeriod.PERIOD_FIELDS, "kw_hour_cost"]

    kw_hour_cost = shown_with_formula(EnergyPrice.cost_per_kw_hour, "Cost of 1 kW of IT load per hour")
