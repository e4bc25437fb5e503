"""Raw samples in the compact layout: one row per node and sample time, the node's GPUs (or ports)
packed into one value (apps/telemetry/packing.py; docs/telemetry-storage.md).

At the 1,000-node scale (8 GPUs each, one sample a second) that is 1,000 rows a second instead of
8,000, about 48 bytes per GPU sample on disk with its indexes instead of 306: no surrogate key (nothing
points at a raw row), one B-tree entry per node and second (node, ts) for the charts, a BRIN index on
``received_at`` for the rollups, and on PostgreSQL one partition per day (apps/telemetry/partitions.py)
that retention drops whole.

No uniqueness on raw rows: an agent whose clock steps back may repeat a timestamp, and one such row
must never poison a whole batch. Duplicates are prevented upstream by the per-node sequence cursor
(TelemetryCursor), advanced in the same transaction as the rows. The composite primary key below is
how Django names a row; the database keeps (node, ts) as a plain index.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Self

import msgspec
from django.db import connection, models

from agents import protocol
from apps.telemetry.models.base import PartitionedQuerySet, node_without_constraint
from apps.telemetry.packing import Packing

# The stored fields of ``agents.protocol.GpuSample`` and ``PortSample``, in stored order: a packed
# value names its fields by position, so a new protocol field is appended here, never inserted
# (tests/telemetry checks that every protocol field is stored).
GPU_METRIC_FIELDS: tuple[str, ...] = (
    "util_gpu",
    "util_mem",
    "mem_used_mib",
    "temp_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "throttle_reasons",
    "ecc_corrected_volatile",
    "ecc_uncorrected_volatile",
    "ecc_corrected_aggregate",
    "ecc_uncorrected_aggregate",
    "retired_pages_pending",
    "remapped_rows_pending",
    "remapped_rows_failed",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "pcie_replay_count",
    "nvlink_crc_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "nvlink_tx_kbps",
    "nvlink_rx_kbps",
    "recovery_action",
)
PORT_SAMPLE_FIELDS: tuple[str, ...] = (
    "device",
    "port",
    "state",
    "rate_gbps",
    "tx_gbps",
    "rx_gbps",
    "symbol_errors",
    "link_downed",
    "rcv_errors",
    "tx_bytes",
    "rx_bytes",
)
GPU_FIELDS: tuple[str, ...] = ("index", *GPU_METRIC_FIELDS)

# What a stored float keeps: steps per unit. 0.01 % and 0.01 °C are finer than NVML reports (whole
# percent and degrees), 1 mW is NVML's own unit for power, 1 Mb/s a thousandth of the slowest link.
GPU_FLOAT_STEPS: dict[str, int] = {
    "util_gpu": 100,
    "util_mem": 100,
    "temp_c": 100,
    "power_w": 1000,
    "power_limit_w": 1000,
}
PORT_FLOAT_STEPS: dict[str, int] = {"rate_gbps": 1000, "tx_gbps": 1000, "rx_gbps": 1000}

GPU_PACKING = Packing.of(protocol.GpuSample, GPU_FIELDS, steps=GPU_FLOAT_STEPS)
PORT_PACKING = Packing.of(protocol.PortSample, PORT_SAMPLE_FIELDS, steps=PORT_FLOAT_STEPS)


def pack(packing: Packing, structs: Sequence[msgspec.Struct]) -> bytes:
    """The packed value of a sample's GPUs or ports, as the protocol carries them."""
    return packing.pack_objects(structs)


def unpack(packing: Packing, struct: type[msgspec.Struct], packed: bytes) -> list[msgspec.Struct]:
    return [struct(**dict(zip(packing.names, item, strict=True))) for item in packing.unpack(packed)]


class NodeSampleQuerySet(PartitionedQuerySet):
    def item_count(self) -> int:
        """How many GPU (or port) samples these rows hold: the second byte of each packed value."""
        column = self.model.PACKED
        if connection.vendor == "postgresql":
            items = models.Func(models.F(column), 1, function="get_byte", output_field=models.IntegerField())
            return self.aggregate(items=models.Sum(items))["items"] or 0
        return sum(packed[1] for packed in self.values_list(column, flat=True).iterator())


class PackedSample(models.Model):
    """A node's GPUs or ports at one time, packed into the ``PACKED`` column with ``PACKING``."""

    PACKED: str
    PACKING: Packing
    STRUCT: type[msgspec.Struct]

    ts = models.DateTimeField(help_text="When the agent took the sample.")
    received_at = models.DateTimeField(help_text="When the server stored the batch holding this sample.")

    class Meta:
        abstract = True

    @classmethod
    def of(cls, node_id: int, ts: datetime, structs: Sequence[msgspec.Struct], received_at: datetime) -> Self:
        """A row of these GPUs' (or ports') samples, as the protocol carries them."""
        return cls(node_id=node_id, ts=ts, received_at=received_at, **{cls.PACKED: pack(cls.PACKING, structs)})

    def readings(self) -> list[Any]:
        """The samples, as the protocol carries them."""
        return unpack(self.PACKING, self.STRUCT, getattr(self, self.PACKED))


class NodeSample(PackedSample):
    """A raw row: a node's GPUs or ports at one time, in the day's partition."""

    PARTITIONED_BY = "ts"

    node = node_without_constraint(on_delete=models.DO_NOTHING, related_name="+")

    objects = NodeSampleQuerySet.as_manager()

    class Meta:
        abstract = True


class NodeGpuSample(NodeSample):
    """A node's GPUs at one time, kept ``TELEMETRY_RAW_RETENTION_HOURS``. Written by storage.write_batch."""

    PACKED, PACKING, STRUCT = "gpus", GPU_PACKING, protocol.GpuSample

    pk = models.CompositePrimaryKey("node", "ts")
    gpus = models.BinaryField(help_text="Every GPU's reading, packed (GPU_PACKING).")

    def __str__(self) -> str:
        return f"node {self.node_id} GPUs @ {self.ts:%Y-%m-%d %H:%M:%S}"


class NodePortSample(NodeSample):
    """A node's ports at one time, kept as long as its GPUs' samples."""

    PACKED, PACKING, STRUCT = "ports", PORT_PACKING, protocol.PortSample

    pk = models.CompositePrimaryKey("node", "ts")
    ports = models.BinaryField(help_text="Every port's reading, packed (PORT_PACKING).")

    def __str__(self) -> str:
        return f"node {self.node_id} ports @ {self.ts:%Y-%m-%d %H:%M:%S}"
