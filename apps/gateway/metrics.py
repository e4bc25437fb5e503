"""The gateway's part of ``/metrics``: what it refused from each node's agent (a malformed, oversize or
invalid frame, a node speaking for another, ...), by the protocol's error code, from its counters
(GatewayCounter). Refused connections that named no node carry no node labels and, belonging to no
cluster, are left out of a scrape limited with ``?cluster=``."""

from collections.abc import Iterator

from django.db.models import F

from apps.core.metrics import Family, Scrape, labels
from apps.gateway.models import GatewayCounter
from apps.inventory.metrics import node_label_fields, node_labels


def collect(scrape: Scrape) -> Iterator[Family]:
    """One query."""
    counters = GatewayCounter.objects.all()
    if scrape.clusters:
        counters = scrape.within(counters, "node__cluster__name")
    rows = counters.order_by(F("node__hostname").asc(nulls_first=True), "code").values_list(
        *node_label_fields("node__"), "code", "count"
    )
    yield Family(
        "controlplane_gateway_refused_messages_total",
        "counter",
        "Messages and connections the gateway refused, by the protocol's error code (the agent's data in a "
        "refused frame is lost).",
        [
            (labels((*(node_labels(host, cluster, rack) if host else ()), ("code", code))), count)
            for host, cluster, rack, code, count in rows
        ],
    )
