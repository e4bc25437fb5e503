import django_filters
from django.db.models import QuerySet

from apps.core.api.filters import FilterSet
from apps.costs.choices import PriceKind
from apps.costs.models import EnergyPrice, GpuPrice


class PricePeriodFilterSet(FilterSet):
    valid_at = django_filters.DateFilter(method="in_force_on", label="In force on this date (YYYY-MM-DD)")

    def in_force_on(self, queryset: QuerySet, name: str, value: object) -> QuerySet:
        return queryset.in_force(value) if value else queryset


class GpuPriceFilterSet(PricePeriodFilterSet):
    kind = django_filters.MultipleChoiceFilter(choices=PriceKind.choices)
    node_type_name = django_filters.CharFilter(field_name="node_type__name")

    class Meta:
        model = GpuPrice
        fields = ["node_type", "kind", "currency"]


class EnergyPriceFilterSet(PricePeriodFilterSet):
    cluster_name = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = EnergyPrice
        fields = ["cluster", "currency"]
