"""The failures' part of ``/metrics`` (apps/core/metrics.py): how many failures are still being worked
on, by node, kind, severity and state (open, or acknowledged by someone), for Alertmanager
(docs/prometheus/alerts.yml: a critical failure open). A node, kind and severity with none has no
series, so ``sum by (kind) (controlplane_failures_active)`` counts only what is there."""

from collections.abc import Iterator

from django.db.models import Count

from apps.core.metrics import Family, Scrape, labels
from apps.failures.models import Failure
from apps.inventory.metrics import node_label_fields, node_labels


def collect(scrape: Scrape) -> Iterator[Family]:
    """One query."""
    fields = (*node_label_fields("node__"), "kind", "severity", "state")
    rows = (
        scrape.within(Failure.objects.alarms(), "node__cluster__name")
        .values(*fields)
        .annotate(failures=Count("id"))
        .order_by(*fields)
        .values_list(*fields, "failures")
    )
    yield Family(
        "controlplane_failures_active",
        "gauge",
        "Failures not yet resolved, by kind, severity and state (open, or acknowledged).",
        [
            (
                labels((*node_labels(host, cluster, rack), ("kind", kind), ("severity", severity), ("state", state))),
                failures,
            )
            for host, cluster, rack, kind, severity, state, failures in rows
        ],
    )
