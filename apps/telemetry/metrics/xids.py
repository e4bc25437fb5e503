"""``controlplane_gpu_xid_errors_total``: how many times each GPU reported each XID, from the stored
events (apps/telemetry/events.py). dcgm-exporter's ``DCGM_FI_DEV_XID_ERRORS`` is only the last one, so
``increase(controlplane_gpu_xid_errors_total[1h])`` is what tells a storm from a single event. Exported
whatever the age of the GPU's newest sample: the count is the control plane's record, not a reading."""

from collections.abc import Iterator

from django.db.models import OuterRef, Subquery

from apps.core.metrics import Family, Scrape, labels
from apps.inventory.metrics import node_label_fields, node_labels
from apps.inventory.models import Gpu
from apps.telemetry.models import XidCount


def collect(scrape: Scrape) -> Iterator[Family]:
    """One query."""
    uuid = Gpu.objects.filter(node_id=OuterRef("node_id"), index=OuterRef("gpu_index")).values("uuid")[:1]
    rows = (
        scrape.within(XidCount.objects, "node__cluster__name")
        .annotate(uuid=Subquery(uuid))
        .order_by("node__hostname", "gpu_index", "xid")
        .values_list(*node_label_fields("node__"), "gpu_index", "uuid", "xid", "count")
    )
    yield Family(
        "controlplane_gpu_xid_errors_total",
        "counter",
        "How many times the GPU reported this XID (since the control plane first heard from it).",
        [
            (
                labels((("gpu", str(gpu)), ("UUID", uuid or ""), *node_labels(host, cluster, rack), ("xid", str(xid)))),
                count,
            )
            for host, cluster, rack, gpu, uuid, xid, count in rows
        ],
    )
