"""The load of node links now, for link utilization (apps/inventory/topology.py).

The writer keeps each node's newest port sample in ``LatestPortSample`` (refreshed every few seconds,
as the newest GPU samples are), so the fleet's load needs no raw history: one row per node (1,000 at
1,000 nodes), only the fields the load needs unpacked. A node whose newest port sample is older than
``RECENT`` has no reading now, rather than an old one passed off as current.
"""

from datetime import datetime, timedelta
from typing import Final

from apps.inventory.topology import PortLoads
from apps.telemetry.models import LatestPortSample

RECENT: Final = timedelta(seconds=60)
_FIELDS: Final = ("device", "port", "tx_gbps", "rx_gbps", "rate_gbps")


def link_loads(*, now: datetime) -> PortLoads:
    """Each port's tx, rx and rate (Gb/s) in its node's newest sample within ``RECENT`` of ``now``, by
    node, device and port number: one query."""
    recent = LatestPortSample.objects.filter(ts__gte=now - RECENT).order_by()
    return {
        (node_id, device, number): (tx, rx, rate)
        for (node_id,), ports in recent.unpacked(_FIELDS, "node_id")
        for device, number, tx, rx, rate in ports
    }
