import django_filters

from apps.core.api.filters import FilterSet, IntegerFilter
from apps.jobs.choices import CHECK_CHOICES, CommandState, RunKind, RunState
from apps.jobs.models import Command, Run


class RunFilterSet(FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=RunState.choices)
    kind = django_filters.MultipleChoiceFilter(choices=RunKind.choices)
    node = IntegerFilter(field_name="commands__node", distinct=True, label="Runs with a command on it")

    class Meta:
        model = Run
        fields = ["state", "kind", "node"]


class CommandFilterSet(FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=CommandState.choices)
    check = django_filters.MultipleChoiceFilter(field_name="check_name", choices=CHECK_CHOICES)
    hostname = django_filters.CharFilter(field_name="node__hostname")

    class Meta:
        model = Command
        fields = ["run", "node", "state", "check"]
