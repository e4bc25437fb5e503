"""The failures page: the live feed of alarms and the history behind it, filtered the way the REST API
filters (apps/failures/filtersets.py), with acknowledge and resolve for operators.

The list is one template (``_failure_list.html``) rendered here for the first view and again, with
``?partial=1``, whenever failures.js learns from ``ws/live``'s failures feed that one changed: the
markup of a failure lives in one place, and every value in it is escaped by the template engine.
"""

from collections import defaultdict
from datetime import timedelta
from typing import Any, Final

from django.db.models import Count
from django.http import QueryDict
from django.utils import timezone

from apps.dashboard.actions import attach_moves
from apps.dashboard.views.base import DashboardPage
from apps.failures.choices import FailureKind, FailureState, Severity
from apps.failures.filtersets import FailureFilterSet
from apps.failures.models import Failure
from apps.inventory.models import Node

PAGE_SIZE: Final = 50
MAX_LIMIT: Final = 500  # what one refresh re-reads, however far the user has loaded

# The page's "state" choice: its label and the filterset's parameters. Side effects are never rows of
# their own: they are listed under their cause.
STATE_VIEWS: Final[dict[str, tuple[str, dict[str, str]]]] = {
    "active": ("Open and acknowledged", {"open": "true"}),
    FailureState.OPEN: ("Open", {"state": FailureState.OPEN, "side_effect": "false"}),
    FailureState.ACKNOWLEDGED: ("Acknowledged", {"state": FailureState.ACKNOWLEDGED, "side_effect": "false"}),
    FailureState.RESOLVED: ("Resolved", {"state": FailureState.RESOLVED, "side_effect": "false"}),
    "all": ("All", {"side_effect": "false"}),
}
DEFAULT_STATE: Final = "active"
SINCE_CHOICES: Final[dict[str, tuple[str, timedelta]]] = {
    "1h": ("Last hour", timedelta(hours=1)),
    "24h": ("Last 24 hours", timedelta(hours=24)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
}


def bounded_int(text: str | None, default: int, low: int, high: int) -> int:
    """``text`` as a whole number within [low, high]; ``default`` when it is not one."""
    try:
        return min(max(int(text or ""), low), high)
    except ValueError:
        return default


class FailuresPage(DashboardPage):
    nav = "failures"
    template_name = "dashboard/failures.html"

    def get_template_names(self) -> list[str]:
        return ["dashboard/_failure_list.html" if "partial" in self.request.GET else self.template_name]

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        query = self.request.GET
        state = query.get("state") or DEFAULT_STATE
        offset = bounded_int(query.get("offset"), 0, 0, 10**9)
        limit = bounded_int(query.get("limit"), PAGE_SIZE, 1, MAX_LIMIT)
        failures: list[Failure] = []
        errors: dict[str, str] = {}
        if state not in STATE_VIEWS:
            errors["state"] = f"Unknown state “{state}”: choose one of {', '.join(STATE_VIEWS)}."
        else:
            filters = filterset(query, state)
            if filters.is_valid():
                failures = list(filters.qs.order_by("-last_seen", "-id")[offset : offset + limit + 1])
            errors = {name: " ".join(problems) for name, problems in filters.errors.items()}
        has_more = len(failures) > limit
        failures = failures[:limit]
        attach_side_effects(failures)
        attach_moves(failures, self.request.user.effective_role)
        more = query.copy()
        more.setlist("offset", [str(offset + limit)])
        more.setlist("limit", [str(PAGE_SIZE)])
        more.pop("partial", None)
        return super().get_context_data(**kwargs) | {
            "failures": failures,
            "has_more": has_more,
            "more_query": more.urlencode(),
            "errors": errors,
            "selected": {
                "state": state,
                "severity": query.get("severity", ""),
                "kind": query.get("kind", ""),
                "hostname": query.get("hostname", ""),
                "since": query.get("since", ""),
            },
            "is_filtered": any(query.get(name) for name in ("severity", "kind", "hostname", "since"))
            or state != DEFAULT_STATE,
            "is_feed": state == DEFAULT_STATE,
            "state_choices": [(value, label) for value, (label, _) in STATE_VIEWS.items()],
            "severity_choices": Severity.choices,
            "kind_choices": FailureKind.choices,
            "since_choices": [(value, label) for value, (label, _) in SINCE_CHOICES.items()],
            "since_custom": "" if query.get("since", "") in SINCE_CHOICES else query.get("since", ""),
            "summary": alarm_summary(),
            "has_nodes": Node.objects.exists(),
        }


def filterset(query: QueryDict, state: str) -> FailureFilterSet:
    """The REST API's filterset fed the page's query string: its ``state`` choice (a key of
    STATE_VIEWS) becomes the filterset's parameters, a ``since`` of 1h/24h/7d/30d a time, and any
    other ``since`` goes through as the ISO 8601 time the filterset expects."""
    data = QueryDict(mutable=True)
    for name in ("severity", "kind", "hostname", "since"):
        if value := query.get(name, "").strip():
            data[name] = value
    if data.get("since") in SINCE_CHOICES:
        data["since"] = (timezone.now() - SINCE_CHOICES[data["since"]][1]).isoformat()
    data.update(STATE_VIEWS[state][1])
    return FailureFilterSet(data, queryset=Failure.objects.with_related())


def attach_side_effects(failures: list[Failure]) -> None:
    """Give each failure its side effects as ``side_effect_rows``: one query for all of them."""
    causes = [failure.pk for failure in failures if failure.side_effect_count]
    effects: dict[int, list[Failure]] = defaultdict(list)
    if causes:
        for effect in Failure.objects.filter(cause__in=causes).select_related("node").order_by("first_seen", "id"):
            effects[effect.cause_id].append(effect)
    for failure in failures:
        failure.side_effect_rows = effects[failure.pk]


def alarm_summary() -> dict[str, Any]:
    """How many alarms are open and acknowledged, and how many of each severity: one query."""
    by_severity: dict[str, int] = dict.fromkeys(Severity.values, 0)
    by_state: dict[str, int] = {FailureState.OPEN: 0, FailureState.ACKNOWLEDGED: 0}
    for severity, state, number in (
        Failure.objects.alarms().values_list("severity", "state").annotate(n=Count("id")).order_by()
    ):
        by_severity[severity] += number
        by_state[state] += number
    return {
        "total": sum(by_state.values()),
        "open": by_state[FailureState.OPEN],
        "acknowledged": by_state[FailureState.ACKNOWLEDGED],
        "severities": [(Severity(value), number) for value, number in by_severity.items()],
    }
