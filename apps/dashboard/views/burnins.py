"""The burn-in form (includes/burn_in_dialog.html, burnin-form.js): what it offers an operator, read in
a fixed number of queries. It posts to ``POST /api/v1/burn-ins``, which checks the role again and
refuses, by name, a node that cannot start one now; viewers get no form at all."""

from typing import Any, Final

from django.db.models import Count, Q

from apps.burnin.models import Suite
from apps.burnin.starting import STARTS_FROM
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Cluster, Node
from apps.jobs.api.serializers import DEFAULT_DEADLINE_S, MAX_NODES_PER_RUN

DEFAULT_SUITE: Final = "quick"
# The deadlines offered (seconds, words): past its deadline a node's commands expire with that reason.
DEADLINES: Final = ((3600, "1 hour"), (DEFAULT_DEADLINE_S, "6 hours"), (86400, "1 day"), (3 * 86400, "3 days"))


def param_words(value: Any) -> str:
    return "/".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def step_words(step: dict[str, Any]) -> str:
    """One step of a suite as the form lists it: its check and what it was given."""
    params = ", ".join(f"{name}={param_words(value)}" for name, value in (step.get("params") or {}).items())
    return step["check"] + (f" ({params})" if params else "")


def pickable_nodes() -> list[dict[str, Any]]:
    """The nodes that can start a burn-in now, with their cluster and state (the picker filters by them)."""
    nodes = Node.objects.filter(lifecycle__in=STARTS_FROM).order_by("hostname")
    return [
        {
            "id": pk,
            "hostname": hostname,
            "cluster": cluster,
            "lifecycle": lifecycle,
            "state": Lifecycle(lifecycle).label,
        }
        for pk, hostname, cluster, lifecycle in nodes.values_list("id", "hostname", "cluster__name", "lifecycle")[
            :MAX_NODES_PER_RUN
        ]
    ]


def burn_in_form(*, pick_nodes: bool, on: str = "The selected nodes") -> dict[str, Any]:
    """The suites with their steps, the clusters with how many of their nodes can start a burn-in now,
    and, where the page has no selection of its own (``pick_nodes``: the runs page), those nodes (at most
    MAX_NODES_PER_RUN, filtered in the browser by node-picker.js).
    ``on``: what the page's own selection is called (a node page's is its node)."""
    suites = [
        {"name": s.name, "title": s.title, "description": s.description, "steps": [step_words(x) for x in s.steps]}
        for s in Suite.objects.order_by("-builtin", "name")
    ]
    startable = Cluster.objects.annotate(startable=Count("nodes", filter=Q(nodes__lifecycle__in=STARTS_FROM)))
    clusters = list(startable.order_by("name").values("name", "startable"))
    nodes = pickable_nodes() if pick_nodes else None
    return {
        "on": on,
        "suites": suites,
        "default_suite": DEFAULT_SUITE,
        "clusters": clusters,
        "nodes": nodes,
        # Nodes that can start one but are past the picker's MAX_NODES_PER_RUN (the form says how many).
        "nodes_unlisted": sum(c["startable"] for c in clusters) - len(nodes) if nodes is not None else 0,
        "max_nodes": MAX_NODES_PER_RUN,
        # What the picker filters its nodes by (node-picker.js): the states they can start from.
        "lifecycles": [(choice.value, choice.label) for choice in Lifecycle if choice in STARTS_FROM],
        "deadlines": DEADLINES,
        "default_deadline_s": DEFAULT_DEADLINE_S,
    }
