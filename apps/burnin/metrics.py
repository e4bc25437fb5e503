"""The burn-ins' part of ``/metrics``: each cluster's automatic-quarantine breaker (docs/metrics.md),
0 or 1 for every cluster, so ``QuarantineBreakerOpen`` (docs/prometheus) needs no absent() guard."""

from collections.abc import Iterator

from apps.burnin.models import QuarantineBreaker
from apps.core.metrics import Family, Labels, Scrape, labels
from apps.inventory.models import Cluster


def collect(scrape: Scrape) -> Iterator[Family]:
    """Two queries: the clusters and the open breakers."""
    clusters = scrape.within(Cluster.objects, "name").order_by("name").values_list("pk", "name")
    open_ones = set(QuarantineBreaker.objects.filter(is_open=True).values_list("cluster_id", flat=True))
    series: list[tuple[Labels, int]] = [(labels((("cluster", name),)), int(pk in open_ones)) for pk, name in clusters]
    yield Family(
        "controlplane_quarantine_breaker_open",
        "gauge",
        "Whether the cluster's automatic-quarantine circuit breaker is open (1): automation quarantined as many "
        "nodes as it may within its window and stopped, waiting for a person; 0 while it is closed.",
        series,
    )
