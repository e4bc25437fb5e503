"""The newest traffic reading of node ports, for link utilization (apps/inventory/topology.py).

Raw port samples hold 48 hours of every port's second-by-second readings (hundreds of millions of rows
at the 1,000-node scale), so "the newest per port" is a correlated lookup on the (node, ts) index,
one short backward range scan per port, bounded to the last ``RECENT``: a port that has not reported
since has no reading now, rather than an old one passed off as current. Two queries, whatever the
fleet's size.
"""

from datetime import datetime, timedelta
from typing import Final

from django.db.models import OuterRef, QuerySet, Subquery

from apps.inventory.models import NetworkPort
from apps.inventory.topology import PortKey
from apps.telemetry.models import PortSample

RECENT: Final = timedelta(seconds=60)

Reading = tuple[float | None, float | None, float | None]  # tx Gb/s, rx Gb/s, negotiated rate Gb/s


def latest_port_readings(ports: QuerySet[NetworkPort], *, now: datetime) -> dict[PortKey, Reading]:
    """``{(node, device, port): (tx_gbps, rx_gbps, rate_gbps)}`` of these ports' newest sample within
    ``RECENT`` of ``now``; ports without one are left out."""
    newest = PortSample.objects.filter(
        node_id=OuterRef("node_id"), device=OuterRef("device_name"), port=OuterRef("port_num"), ts__gte=now - RECENT
    ).order_by("-ts")
    # Two queries, not one with an IN (subquery): the planner could then choose to scan every raw
    # sample; a list of ids is a primary-key lookup each.
    found = ports.annotate(sample=Subquery(newest.values("id")[:1])).order_by().values_list("sample", flat=True)
    sample_ids = [sample for sample in found if sample is not None]
    samples = PortSample.objects.filter(id__in=sample_ids).values_list(
        "node_id", "device", "port", "tx_gbps", "rx_gbps", "rate_gbps"
    )
    return {(node, device, port): (tx, rx, rate) for node, device, port, tx, rx, rate in samples}
