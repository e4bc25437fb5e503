"""The load of node links now, for link utilization (apps/inventory/topology.py).

The writer keeps each port's newest sample in ``LatestPortSample`` (refreshed every few seconds, as the
newest GPU samples are), so the fleet's load needs no raw history: each cabled port is joined to its
newest sample in the query that reads the topology's nodes, and summed per node and switch there,
one row per node under each switch (1,000 at 1,000 nodes of 8 ports, not 8,000 ports and 8,000
samples read into Python). A port whose newest sample is older than ``RECENT`` has no reading now,
rather than an old one passed off as current.
"""

from datetime import datetime, timedelta
from typing import Final

from django.db.models import Count, F, FilteredRelation, FloatField, Q, Sum, Value
from django.db.models.functions import Cast, Coalesce, NullIf

from apps.inventory.topology import LoadJoin, cabled_node_ports

RECENT: Final = timedelta(seconds=60)


def link_loads(*, now: datetime) -> LoadJoin:
    """Each cabled node port's newest sample within ``RECENT`` of ``now`` (a left join: a port without
    one reports nothing), summed as tx, rx, rate (a port that reports no rate, or 0: the inventory's)
    and links (the ports that reported)."""
    newest = FilteredRelation(
        "node__latest_port_samples",
        condition=Q(
            node__latest_port_samples__device=F("device_name"),
            node__latest_port_samples__port=F("port_num"),
            node__latest_port_samples__ts__gte=now - RECENT,
        ),
    )
    rate = Coalesce(NullIf("newest__rate_gbps", Value(0.0)), Cast("rate_gbps", FloatField()))
    reported = Q(newest__ts__isnull=False)
    return LoadJoin(
        cabled_node_ports().annotate(newest=newest),
        {
            "tx": Sum("newest__tx_gbps"),
            "rx": Sum("newest__rx_gbps"),
            "rate": Sum(rate, filter=reported),
            "links": Count("newest__ts"),
        },
    )
