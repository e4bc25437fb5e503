"""The gateway's part of ``/metrics``: what it refused from each node's agent (a malformed, oversize or
invalid frame, a node speaking for another, ...), by the protocol's error code, from its counters
(GatewayCounter); and what each agent last said of its buffer (NodeAgent: samples it holds for the
server, samples it lost from a full buffer). What it refused before a node was known (a connection
with a missing, invalid or revoked credential) is the control plane's series
(``collect_before_a_node``): no node's labels, and no cluster's.
"""

from collections.abc import Iterator

from apps.core.metrics import Family, Scrape, labels
from apps.gateway.models import GatewayCounter, NodeAgent
from apps.inventory.metrics import node_label_fields, node_labels


def collect(scrape: Scrape) -> Iterator[Family]:
    """Two queries."""
    counters = scrape.within(GatewayCounter.objects.filter(node__isnull=False), "node__cluster__name")
    rows = counters.order_by("node__hostname", "code").values_list(*node_label_fields("node__"), "code", "count")
    yield Family(
        "controlplane_gateway_refused_messages_total",
        "counter",
        "Messages the gateway refused from the node's agent, by the protocol's error code (the data in a "
        "refused frame is lost).",
        [
            (labels((*node_labels(host, cluster, rack), ("code", code))), count)
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


def collect_before_a_node(scrape: Scrape) -> Iterator[Family]:
    """One query."""
    rows = GatewayCounter.objects.filter(node__isnull=True).order_by("code").values_list("code", "count")
    yield Family(
        "controlplane_gateway_refused_connections_total",
        "counter",
        "Connections the gateway refused before a node was known (a missing, invalid or revoked credential).",
        [(labels((("code", code),)), count) for code, count in rows],
    )
