import django_filters
from django.db.models import QuerySet

from apps.gateway.models import DiscoveryChange, EnrollmentToken, GatewayCounter, NodeCredential


class EnrollmentTokenFilterSet(django_filters.FilterSet):
    usable = django_filters.BooleanFilter(method="filter_usable", label="Still usable")

    class Meta:
        model = EnrollmentToken
        fields = ["hostname", "cluster", "used_by_node"]

    def filter_usable(self, queryset: QuerySet, name: str, value: bool) -> QuerySet:
        usable = EnrollmentToken.objects.usable().values("pk")
        return queryset.filter(pk__in=usable) if value else queryset.exclude(pk__in=usable)


class NodeCredentialFilterSet(django_filters.FilterSet):
    revoked = django_filters.BooleanFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)
    hostname = django_filters.CharFilter(field_name="node__hostname")

    class Meta:
        model = NodeCredential
        fields = ["node"]


class DiscoveryChangeFilterSet(django_filters.FilterSet):
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")
    hostname = django_filters.CharFilter(field_name="node__hostname")

    class Meta:
        model = DiscoveryChange
        fields = ["node", "kind", "subject"]


class GatewayCounterFilterSet(django_filters.FilterSet):
    hostname = django_filters.CharFilter(field_name="node__hostname")

    class Meta:
        model = GatewayCounter
        fields = ["node", "code"]
