import django_filters
from django.db.models import Q, QuerySet

from apps.core.api.filters import BooleanFilter, FilterSet, IntegerFilter
from apps.inventory.choices import GpuState, Lifecycle, LinkState, Liveness, PortKind, SwitchTier
from apps.inventory.models import (
    Cluster,
    Fabric,
    Gpu,
    Link,
    NetworkPort,
    Node,
    NodeTransition,
    NodeType,
    NvLink,
    Rack,
    Switch,
    SwitchPort,
)


class SearchFilterSet(FilterSet):
    """``?q=`` searches the fields a subclass names in ``search_fields`` (case-insensitive)."""

    search_fields: tuple[str, ...] = ()
    q = django_filters.CharFilter(method="search", label="Search")

    def search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        value = value.strip()
        if not value:
            return queryset
        condition = Q()
        for field in self.search_fields:
            condition |= Q(**{f"{field}__icontains": value})
        return queryset.filter(condition)


class ClusterFilterSet(SearchFilterSet):
    search_fields = ("name", "description", "site")

    class Meta:
        model = Cluster
        fields = ["name", "site"]


class NodeTypeFilterSet(SearchFilterSet):
    search_fields = ("name", "gpu_model")

    class Meta:
        model = NodeType
        fields = ["name", "gpu_model"]


class RackFilterSet(SearchFilterSet):
    search_fields = ("name", "location")

    class Meta:
        model = Rack
        fields = ["cluster", "name"]


class NodeFilterSet(SearchFilterSet):
    search_fields = ("hostname", "serial", "management_address")
    lifecycle = django_filters.MultipleChoiceFilter(choices=Lifecycle.choices)
    liveness = django_filters.MultipleChoiceFilter(choices=Liveness.choices)
    cluster_name = django_filters.CharFilter(field_name="cluster__name")
    node_type_name = django_filters.CharFilter(field_name="node_type__name")
    leaf_switch = django_filters.ModelChoiceFilter(
        queryset=Switch.objects.all(), method="under_switch", label="Nodes cabled to this switch (id)"
    )
    leaf_switch_name = django_filters.CharFilter(method="under_switch_name", label="Nodes cabled to this switch (name)")

    class Meta:
        model = Node
        fields = ["hostname", "cluster", "node_type", "rack", "lifecycle", "liveness"]

    def under_switch(self, queryset: QuerySet, name: str, value: Switch | None) -> QuerySet:
        return queryset.filter(pk__in=Node.objects.under_switch(value).values("pk")) if value else queryset

    def under_switch_name(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(ports___peer_switch_port__switch__name=value).distinct() if value else queryset


class NodeTransitionFilterSet(FilterSet):
    hostname = django_filters.CharFilter(field_name="node__hostname")
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")

    class Meta:
        model = NodeTransition
        fields = ["node", "from_state", "to_state", "actor"]


class GpuFilterSet(SearchFilterSet):
    search_fields = ("uuid", "serial", "node__hostname", "pci_bus_id")
    state = django_filters.MultipleChoiceFilter(choices=GpuState.choices)
    hostname = django_filters.CharFilter(field_name="node__hostname")
    cluster = IntegerFilter(field_name="node__cluster")

    class Meta:
        model = Gpu
        fields = ["node", "uuid", "index", "model", "state"]


class NetworkPortFilterSet(SearchFilterSet):
    search_fields = ("device_name", "guid", "mac", "node__hostname")
    kind = django_filters.MultipleChoiceFilter(choices=PortKind.choices)
    link_state = django_filters.MultipleChoiceFilter(choices=LinkState.choices)
    hostname = django_filters.CharFilter(field_name="node__hostname")
    connected_switch = IntegerFilter(field_name="_peer_switch_port__switch")
    cabled = BooleanFilter(field_name="_link", lookup_expr="isnull", exclude=True)

    class Meta:
        model = NetworkPort
        fields = ["node", "device_name", "kind", "link_state"]


class FabricFilterSet(SearchFilterSet):
    search_fields = ("name", "description")

    class Meta:
        model = Fabric
        fields = ["cluster", "kind", "topology"]


class SwitchFilterSet(SearchFilterSet):
    search_fields = ("name", "model")
    tier = django_filters.MultipleChoiceFilter(choices=SwitchTier.choices)

    class Meta:
        model = Switch
        fields = ["fabric", "tier", "rack", "name"]


class SwitchPortFilterSet(SearchFilterSet):
    search_fields = ("name", "switch__name")
    switch_name = django_filters.CharFilter(field_name="switch__name")
    cabled = BooleanFilter(field_name="_link", lookup_expr="isnull", exclude=True)

    class Meta:
        model = SwitchPort
        fields = ["switch", "name", "link_state"]


class LinkFilterSet(FilterSet):
    switch = IntegerFilter(field_name="terminations__switch_port__switch", distinct=True)
    node = IntegerFilter(field_name="terminations__network_port__node", distinct=True)

    class Meta:
        model = Link
        fields = ["status"]


class NvLinkFilterSet(FilterSet):
    node = IntegerFilter(field_name="_node")
    hostname = django_filters.CharFilter(field_name="_node__hostname")

    class Meta:
        model = NvLink
        fields = ["link_state", "lanes"]
