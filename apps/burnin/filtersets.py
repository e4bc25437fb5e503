import django_filters

from apps.burnin.choices import NodeState, Outcome
from apps.burnin.models import BurnIn, BurnInCheck, BurnInNode, QuarantineBreaker, ThresholdVersion
from apps.core.api.filters import BooleanFilter, FilterSet, IntegerFilter
from apps.jobs.choices import CHECK_CHOICES


class BurnInFilterSet(FilterSet):
    node = IntegerFilter(field_name="nodes__node", distinct=True, label="Burn-ins of this node")
    suite = django_filters.CharFilter(field_name="suite__name")
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = BurnIn
        fields = ["node", "suite", "cluster", "run"]


class BurnInNodeFilterSet(FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=NodeState.choices)
    outcome = django_filters.MultipleChoiceFilter(choices=Outcome.choices)
    hostname = django_filters.CharFilter(field_name="node__hostname")

    class Meta:
        model = BurnInNode
        fields = ["burn_in", "node", "state", "outcome", "hostname"]


class BurnInCheckFilterSet(FilterSet):
    burn_in = IntegerFilter(field_name="burn_in_node__burn_in")
    node = IntegerFilter(field_name="burn_in_node__node")
    hostname = django_filters.CharFilter(field_name="burn_in_node__node__hostname")
    check = django_filters.MultipleChoiceFilter(field_name="check_name", choices=CHECK_CHOICES)
    passed = BooleanFilter()

    class Meta:
        model = BurnInCheck
        fields = ["burn_in", "node", "hostname", "check", "passed"]


class ThresholdFilterSet(FilterSet):
    node_type = IntegerFilter(field_name="node_type")

    class Meta:
        model = ThresholdVersion
        fields = ["node_type"]


class BreakerFilterSet(FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    is_open = BooleanFilter()

    class Meta:
        model = QuarantineBreaker
        fields = ["cluster", "is_open"]
