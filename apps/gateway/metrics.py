"""The gateway's part of ``/metrics``: what it refused from each node's agent (a malformed, oversize or
invalid frame, a node speaking for another, ...), by the protocol's error code, from its counters
(GatewayCounter); and what each agent last said of its buffer (NodeAgent: samples it holds for the
server, samples it lost from a full buffer). Refused connections that named no node carry no node
labels and, belonging to no cluster, are left out of a scrape limited with ``?cluster=``."""

from collections.abc import Iterator

from django.db.models import F

from apps.core.metrics import Family, Scrape, labels
from apps.gateway.models import GatewayCounter, NodeAgent
from apps.inventory.metrics import node_label_fields, node_labels


def collect(scrape: Scrape) -> Iterator[Family]:
    """Two queries."""
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
    agents = (
        scrape.within(NodeAgent.objects.filter(buffer_reported_at__isnull=False), "node__cluster__name")
        .order_by("node__hostname")
        .values_list(*node_label_fields("node__"), "buffered_samples", "dropped_samples")
    )
    rows = [(labels(node_labels(host, cluster, rack)), held, dropped) for host, cluster, rack, held, dropped in agents]
    yield Family(
        "controlplane_agent_buffered_samples",
        "gauge",
        "Samples the node's agent holds that the control plane has not acknowledged, as it last said.",
        [(label, held) for label, held, _ in rows],
    )
    yield Family(
        "controlplane_agent_dropped_samples_total",
        "counter",
        "Samples the node's agent lost from a full buffer (the control plane away too long), as it last said.",
        [(label, dropped) for label, _, dropped in rows],
    )
