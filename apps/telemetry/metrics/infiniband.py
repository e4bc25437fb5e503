"""node_exporter's infiniband collector's part of ``/metrics``: the newest sample of every InfiniBand
and RoCE port, under node_exporter's names, types and ``device``/``port`` labels
(``node_infiniband_port_data_received_bytes_total``, ``node_infiniband_link_downed_total``, ...), so
dashboards and alerts written for node_exporter work; the node's labels (``Hostname``, ``cluster``,
``rack``) stand where a per-node exporter would have had its ``instance``.

As for the GPUs (``dcgm``), a port whose newest sample is older than ``TELEMETRY_METRICS_MAX_AGE_S`` is
left out, and so is a counter the agent could not read. The data counters are the HCA's own
(``port_xmit_data`` × 4, as node_exporter reports them), so they restart at 0 when the HCA resets them
and Prometheus' ``rate()`` treats that as the counter reset it is.
"""

from collections.abc import Iterator
from datetime import timedelta
from operator import itemgetter

from django.conf import settings

from apps.core.metrics import Column, Family, Scrape, by_column, labels
from apps.inventory.metrics import node_label_fields, node_labels
from apps.telemetry.models import LatestPortSample

# node_exporter's state_id: the PortInfo logical state (1 down, 2 init, 3 armed, 4 active, 5 active
# defer). The agent reports armed as init and a down port whose PHY polls as "polling" (still down).
_STATE_IDS = {"down": 1, "polling": 1, "init": 2, "active": 4}
_BYTES_PER_GBIT = 1e9 / 8
_COUNTERS = ("rx_bytes", "tx_bytes", "link_downed", "symbol_errors", "rcv_errors")
_DEVICE_PORT = itemgetter(0, 1)  # a port's device and number, first of its unpacked values


# Names, types and help texts as node_exporter's collector/infiniband_linux.go has them.
FAMILIES: tuple[Column, ...] = (
    Column(
        "node_infiniband_port_data_received_bytes_total",
        "counter",
        "Number of data octets received on all links",
        "rx_bytes",
    ),
    Column(
        "node_infiniband_port_data_transmitted_bytes_total",
        "counter",
        "Number of data octets transmitted on all links",
        "tx_bytes",
    ),
    Column(
        "node_infiniband_link_downed_total",
        "counter",
        "Number of times the link failed to recover from an error state and went down",
        "link_downed",
    ),
    Column(
        "node_infiniband_symbol_error_total",
        "counter",
        "Number of minor link errors detected on one or more physical lanes.",
        "symbol_errors",
    ),
    Column(
        "node_infiniband_port_errors_received_total",
        "counter",
        "Number of packets containing an error that were received on this port",
        "rcv_errors",
    ),
    Column(
        "node_infiniband_rate_bytes_per_second",
        "gauge",
        "Maximum signal transfer rate",
        "rate_bytes",
    ),
    Column(
        "node_infiniband_state_id",
        "gauge",
        "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)",
        "state_id",
    ),
)


def collect(scrape: Scrape) -> Iterator[Family]:
    """One query whatever the fleet's size: each node's row unpacked here, its ports by device and number."""
    max_age = timedelta(seconds=settings.TELEMETRY_METRICS_MAX_AGE_S)
    fields = ("device", "port", "state", "rate_gbps", *_COUNTERS)
    nodes = (
        scrape.within(LatestPortSample.objects.filter(ts__gte=scrape.now - max_age), "node__cluster__name")
        .order_by("node__hostname")
        .unpacked(fields, *node_label_fields("node__"))
    )
    rows = []
    for node, readings in nodes:
        for values in sorted(readings, key=_DEVICE_PORT):
            port = dict(zip(fields, values, strict=True))
            rate = port["rate_gbps"]
            port["rate_bytes"] = rate * _BYTES_PER_GBIT if rate is not None else None
            port["state_id"] = _STATE_IDS.get(port["state"])
            pairs = (("device", port["device"]), ("port", str(port["port"])), *node_labels(*node))
            rows.append((labels(pairs), port))
    return by_column(FAMILIES, rows)
