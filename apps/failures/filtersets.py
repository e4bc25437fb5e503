import django_filters
from django.db.models import QuerySet

from apps.core.api.filters import BooleanFilter, FilterSet, IntegerFilter
from apps.failures.choices import FailureKind, FailureState, Severity, StragglerMetric
from apps.failures.models import IS_ALARM, Failure, StragglerFlag


class FailureFilterSet(FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=FailureState.choices)
    severity = django_filters.MultipleChoiceFilter(choices=Severity.choices)
    kind = django_filters.MultipleChoiceFilter(choices=FailureKind.choices)
    hostname = django_filters.CharFilter(field_name="node__hostname")
    cluster = IntegerFilter(field_name="node__cluster")
    since = django_filters.IsoDateTimeFilter(field_name="last_seen", lookup_expr="gte", label="Seen at or after")
    open = BooleanFilter(
        method="only_alarms", label="true: open or acknowledged, side effects left out (the feed); false: the rest"
    )
    side_effect = BooleanFilter(field_name="cause", lookup_expr="isnull", exclude=True)

    class Meta:
        model = Failure
        fields = ["node", "gpu", "gpu_index", "port", "xid", "code", "cause"]

    def only_alarms(self, queryset: QuerySet, name: str, value: bool | None) -> QuerySet:
        if value is None:
            return queryset
        return queryset.filter(IS_ALARM) if value else queryset.exclude(IS_ALARM)


class StragglerFlagFilterSet(FilterSet):
    active = BooleanFilter(field_name="cleared_at", lookup_expr="isnull", label="Not cleared yet")
    hostname = django_filters.CharFilter(field_name="node__hostname")
    metric = django_filters.MultipleChoiceFilter(choices=StragglerMetric.choices)
    node_level = BooleanFilter(
        field_name="gpu_index", lookup_expr="isnull", label="true: nodes against their type's fleet; false: GPUs"
    )

    class Meta:
        model = StragglerFlag
        fields = ["node", "gpu", "gpu_index", "failure"]
