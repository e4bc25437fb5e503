import django_filters
from django.db.models import QuerySet

from apps.core.api.filters import BooleanFilter, FilterSet
from apps.gateway.models import DiscoveryChange, EnrollmentToken, GatewayCounter, NodeCredential


class EnrollmentTokenFilterSet(FilterSet):
    usable = BooleanFilter(method="filter_usable", label="Still usable")

    class Meta:
        model = EnrollmentToken
        fields = ["hostname", "cluster", "used_by_node"]

    def filter_usable(self, queryset: QuerySet, name: str, value: bool) -> QuerySet:
        usable = EnrollmentToken.objects.usable().values("pk")
        return queryset.filter(pk__in=usable) if value else queryset.exclude(pk__in=usable)


class NodeCredentialFilterSet(FilterSet):
    revoked = BooleanFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)
    hostname = django_filters.CharFilter(field_name="node__hostname")

    class Meta:
        model = NodeCredential
        fields = ["node"]


class DiscoveryChangeFilterSet(FilterSet):
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")
    hostname = django_filters.CharFilter(field_name="node__hostname")

    class Meta:
        model = DiscoveryChange
        fields = ["node", "kind", "subject"]


class GatewayCounterFilterSet(FilterSet):
    hostname = django_filters.CharFilter(field_name="node__hostname")

    class Meta:
        model = GatewayCounter
        fields = ["node", "code"]
