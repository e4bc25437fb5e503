"""The newest traffic reading of node ports, for link utilization (apps/inventory/topology.py).

The writer keeps each port's newest sample in ``LatestPortSample`` (refreshed every few seconds, as the
newest GPU samples are), so the fleet's readings are one indexed read of a table the size of the
fleet's port count, joined to the ports asked about. A port whose newest sample is older than
``RECENT`` has no reading now, rather than an old one passed off as current.
"""

from datetime import datetime, timedelta
from typing import Final

from django.db.models import Exists, OuterRef, QuerySet

from apps.inventory.models import NetworkPort
from apps.inventory.topology import PortKey
from apps.telemetry.models import LatestPortSample

RECENT: Final = timedelta(seconds=60)

Reading = tuple[float | None, float | None, float | None]  # tx Gb/s, rx Gb/s, negotiated rate Gb/s


def latest_port_readings(ports: QuerySet[NetworkPort], *, now: datetime) -> dict[PortKey, Reading]:
    """``{(node, device, port): (tx_gbps, rx_gbps, rate_gbps)}`` of these ports' newest sample within
    ``RECENT`` of ``now``; ports without one are left out. One query."""
    asked = ports.filter(node_id=OuterRef("node_id"), device_name=OuterRef("device"), port_num=OuterRef("port"))
    samples = LatestPortSample.objects.filter(Exists(asked), ts__gte=now - RECENT).values_list(
        "node_id", "device", "port", "tx_gbps", "rx_gbps", "rate_gbps"
    )
    return {(node, device, port): (tx, rx, rate) for node, device, port, tx, rx, rate in samples}
