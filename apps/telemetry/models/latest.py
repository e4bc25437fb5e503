"""Each node's newest sample: what /metrics, the fleet view, the node page and the topology page read,
one row per node with its GPUs (or ports) packed as the raw row packs them, never the raw history.

A row per node rather than per GPU or port: the writer upserts a batch's nodes' rows with the very
bytes it copies into the raw table (250 rows of 4 columns a batch at 1,000 nodes where it upserted
2,000 of 31), and a reader unpacks only the fields it shows, as the charts do (packing.py: one struct
call a row once its header has been met).
"""

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import fmean
from typing import Any

import msgspec
from django.db import models

from agents import protocol
from apps.telemetry.models.base import node_primary_key
from apps.telemetry.models.samples import GPU_PACKING, PORT_PACKING, NodeGpuSample, PackedSample
from apps.telemetry.packing import Packing

# How far back a page looks for the last reading of a GPU missing from its node's newest sample: a
# GPU gone for longer shows no values (the inventory marks it missing; its old numbers say nothing).
LOST_GPU_LOOKBACK = timedelta(hours=1)
_INDEX = GPU_PACKING.position("index")


@dataclass(frozen=True, slots=True)
class Reading:
    """One GPU's (or port's) newest reading: its sample's time and its values, as the protocol carries
    them (``reading.power_w``, ``reading.index``)."""

    ts: datetime
    values: msgspec.Struct

    def __getattr__(self, name: str) -> Any:
        return getattr(self.values, name)


class LatestSampleQuerySet(models.QuerySet):
    def unpacked(self, fields: Sequence[str], *values: str) -> Iterator[tuple[tuple[Any, ...], list[tuple[Any, ...]]]]:
        """Each row's ``values`` (lookups, as ``values_list`` reads them) and its items, each a tuple of
        the named ``fields``' values (None: absent), unpacking only those fields."""
        packing: Packing = self.model.PACKING
        wanted = [packing.position(name) for name in fields]
        for *row, packed in self.values_list(*values, self.model.PACKED):  # a row a node: one fetch
            count, found = packing.columns(packed, wanted)
            filled = [column if column is not None else (None,) * count for column in found]
            yield tuple(row), list(zip(*filled, strict=True)) if filled else [() for _ in range(count)]

    def readings(self) -> dict[int, list[Reading]]:
        """Every item of each node's newest sample, by node id."""
        found: dict[int, list[Reading]] = defaultdict(list)
        for row in self:
            found[row.node_id].extend(Reading(row.ts, values) for values in row.readings())
        return found


class LatestGpuQuerySet(LatestSampleQuerySet):
    def of_node(self, node_id: int, expected: Iterable[int] = ()) -> dict[int, Reading]:
        """The node's newest reading of each GPU, by index: those of its newest sample, and of each
        ``expected`` GPU that is not in it (it fell off the bus, or the agent stopped seeing it) the
        last one the raw samples of the ``LOST_GPU_LOOKBACK`` before it hold, so that a page shows
        it with its age. One query, and one more when a GPU is missing."""
        readings: dict[int, Reading] = {}
        newest = self.filter(node_id=node_id).first()
        if newest is not None:
            readings = {gpu.index: Reading(newest.ts, gpu) for gpu in newest.readings()}
        missing = set(expected) - readings.keys()
        if newest is None or not missing:
            return readings
        earlier = NodeGpuSample.objects.filter(
            node_id=node_id, ts__lt=newest.ts, ts__gte=newest.ts - LOST_GPU_LOOKBACK
        ).order_by("-ts")
        for row in earlier.iterator(500):
            _, (indices,) = GPU_PACKING.columns(row.gpus, [_INDEX])
            if missing.intersection(indices or ()):
                for gpu in row.readings():
                    if gpu.index in missing:
                        readings[gpu.index] = Reading(row.ts, gpu)
                        missing.discard(gpu.index)
            if not missing:
                break
        return readings

    def node_summaries(self) -> dict[int, dict[str, Any]]:
        """Each node's newest reading in brief, by node id: ``util_gpu_mean`` (%), ``power_w_total``
        (W), ``temp_c_max`` (°C) and ``ts`` (the newest sample's time), as the live fleet stream
        summarises a sample (values a GPU does not report are left out; all missing: None). One query."""
        summaries = {}
        for (node_id, ts), gpus in self.unpacked(("util_gpu", "power_w", "temp_c"), "node_id", "ts"):
            utils = [util for util, _, _ in gpus if util is not None]
            powers = [power for _, power, _ in gpus if power is not None]
            temps = [temp for _, _, temp in gpus if temp is not None]
            summaries[node_id] = {
                "util_gpu_mean": fmean(utils) if utils else None,
                "power_w_total": sum(powers) if powers else None,
                "temp_c_max": max(temps) if temps else None,
                "ts": ts,
            }
        return summaries


class LatestSample(PackedSample):
    """A node's newest sample, replaced whole by a newer one, never by an older one (a replay).
    Upserted by the writer in the same transaction as the raw rows, every 5 s of sample time per node
    (ingest.LATEST_REFRESH_S). UNLOGGED on PostgreSQL (migration 0010): a copy of the newest raw row,
    which after a crash the next batches write again, so it need not be written twice (WAL)."""

    class Meta:
        abstract = True


class LatestGpuSample(LatestSample):
    """Each node's newest GPU sample: every GPU of it, packed (GPU_PACKING). A table rather than Redis:
    /metrics joins it with the inventory in one query, and it never disagrees with the committed rows."""

    PACKED, PACKING, STRUCT = "gpus", GPU_PACKING, protocol.GpuSample

    node = node_primary_key(related_name="latest_gpus")
    gpus = models.BinaryField(help_text="Every GPU's newest reading, packed (GPU_PACKING).")

    objects = LatestGpuQuerySet.as_manager()

    def __str__(self) -> str:
        return f"latest GPUs of node {self.node_id}"


class LatestPortSample(LatestSample):
    """Each node's newest port sample, kept as LatestGpuSample is (same writer, same refresh, same
    never-back-in-time rule): the topology page and the node page read it instead of looking for each
    port's newest raw sample."""

    PACKED, PACKING, STRUCT = "ports", PORT_PACKING, protocol.PortSample

    node = node_primary_key(related_name="latest_ports")
    ports = models.BinaryField(help_text="Every port's newest reading, packed (PORT_PACKING).")

    objects = LatestSampleQuerySet.as_manager()

    def __str__(self) -> str:
        return f"latest ports of node {self.node_id}"
