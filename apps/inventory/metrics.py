"""The inventory's part of ``/metrics`` (apps/core/metrics.py): each node's lifecycle and liveness,
one 0/1 gauge per state as node_exporter exports a systemd unit's, so an alert or a panel selects
the state it cares about (``controlplane_node_liveness{state="unreachable"} == 1``).

Every series of a node carries the same three labels, ``Hostname`` (dcgm-exporter's, so a GPU's
series joins its node's), ``cluster`` and ``rack``; ``node_labels`` is that set for the other apps'
collectors, and ``NODE_LABEL_FIELDS`` the lookups that fetch it with their rows in the same query.
"""

from collections.abc import Iterator

from apps.core.metrics import Family, Labels, Scrape, ScrapeError, labels
from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Cluster, Node

NODE_LABEL_FIELDS = ("hostname", "cluster__name", "rack__name")


def node_label_fields(to_node: str) -> tuple[str, ...]:
    """``NODE_LABEL_FIELDS`` from a row that points to its node through ``to_node`` (e.g. ``"node__"``)."""
    return tuple(f"{to_node}{name}" for name in NODE_LABEL_FIELDS)


def node_labels(hostname: str, cluster: str, rack: str | None) -> tuple[tuple[str, str], ...]:
    return (("Hostname", hostname), ("cluster", cluster), ("rack", rack or ""))


def check_clusters(scrape: Scrape) -> None:
    """Raise ``ScrapeError`` when the scrape names a cluster that does not exist."""
    if not scrape.clusters:
        return
    known = set(Cluster.objects.values_list("name", flat=True))
    unknown = sorted(scrape.clusters - known)
    if unknown:
        raise ScrapeError(
            "cluster", f"no cluster named {', '.join(unknown)}; the clusters are {', '.join(sorted(known)) or 'none'}."
        )


def collect(scrape: Scrape) -> Iterator[Family]:
    """Two queries: the clusters asked for (when some are) and the nodes."""
    check_clusters(scrape)
    nodes = (
        scrape.within(Node.objects, "cluster__name")
        .order_by("hostname")
        .values_list(*NODE_LABEL_FIELDS, "lifecycle", "liveness", "last_seen_at")
    )
    lifecycle: list[tuple[Labels, int]] = []
    liveness: list[tuple[Labels, int]] = []
    last_seen: list[tuple[Labels, float]] = []
    for hostname, cluster, rack, state, live, seen_at in nodes:
        node = node_labels(hostname, cluster, rack)
        lifecycle.extend((labels((*node, ("state", each))), int(each == state)) for each in Lifecycle.values)
        liveness.extend((labels((*node, ("state", each))), int(each == live)) for each in Liveness.values)
        if seen_at is not None:
            last_seen.append((labels(node), seen_at.timestamp()))
    yield Family(
        "controlplane_node_lifecycle",
        "gauge",
        "Whether the node is in this lifecycle state (1) or not (0): new, burn_in, in_service, quarantined, "
        "drained, retired.",
        lifecycle,
    )
    yield Family(
        "controlplane_node_liveness",
        "gauge",
        "Whether the node's agent is in this liveness state (1) or not (0): unknown (never seen), online, unreachable.",
        liveness,
    )
    yield Family(
        "controlplane_node_last_seen_timestamp_seconds",
        "gauge",
        "When the control plane last heard from the node's agent, in seconds since the epoch.",
        last_seen,
    )
