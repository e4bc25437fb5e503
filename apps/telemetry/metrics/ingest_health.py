"""The ingest's own health in ``/metrics``: each server process's totals and its last batch's lag, write
time and backlog, from the rows every ingestor writes every few seconds (IngestProcess). Any process
Prometheus reaches exports every process's, labelled ``process`` (``host:pid``); one that wrote nothing
for ``STALE_AFTER`` (stopped, or stored nothing) is left out, so its series go stale.

These series are the control plane's, of no cluster (registered so, apps/core/metrics.py): a scrape
limited with ``?cluster=`` leaves them out, and ``?nodes=0`` has only them and their like.
"""

from collections.abc import Iterator
from datetime import timedelta

from apps.core.metrics import Column, Family, Scrape, by_column, labels
from apps.telemetry.models import IngestProcess

STALE_AFTER = timedelta(minutes=10)

FAMILIES = (
    Column("controlplane_ingest_messages_total", "counter", "Telemetry messages the process stored.", "messages"),
    Column("controlplane_ingest_gpu_samples_total", "counter", "GPU samples the process stored.", "gpu_samples"),
    Column("controlplane_ingest_port_samples_total", "counter", "Port samples the process stored.", "port_samples"),
    Column(
        "controlplane_ingest_duplicates_total",
        "counter",
        "Telemetry messages dropped as already stored (an agent's replay after a reconnect).",
        "duplicates",
    ),
    Column(
        "controlplane_ingest_failed_batches_total",
        "counter",
        "Batches the database refused; their agents resend them.",
        "failed_batches",
    ),
    Column(
        "controlplane_ingest_lag_seconds",
        "gauge",
        "Age of the freshest sample of the process's last batch when it was stored.",
        "lag_s",
    ),
    Column("controlplane_ingest_write_seconds", "gauge", "How long the process's last batch took to write.", "write_s"),
    Column(
        "controlplane_ingest_pending_rows",
        "gauge",
        "Rows waiting for the process's writer when it last reported.",
        "pending_rows",
    ),
)


def collect(scrape: Scrape) -> Iterator[Family]:
    """One query."""
    rows = IngestProcess.objects.filter(updated_at__gte=scrape.now - STALE_AFTER).order_by("process")
    processes = rows.values("process", *(column.field for column in FAMILIES))
    return by_column(FAMILIES, [(labels((("process", row["process"]),)), row) for row in processes])
