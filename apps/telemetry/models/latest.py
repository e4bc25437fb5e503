"""The newest sample of each GPU and each port: what /metrics, the fleet view, the node page and the
topology page read, one row per GPU or port, never the raw history."""

from typing import Any

from django.db import models
from django.db.models import Avg, Max, Sum

from apps.telemetry.models.base import node_without_constraint


class GpuMetrics(models.Model):
    """One GPU's reading. Every metric is nullable: a field the GPU does not support is absent
    (NULL), never zero."""

    ts = models.DateTimeField(help_text="When the agent took the sample.")
    gpu_index = models.SmallIntegerField()
    util_gpu = models.FloatField(null=True, help_text="SM utilization, %.")
    util_mem = models.FloatField(null=True, help_text="Memory controller utilization, %.")
    mem_used_mib = models.IntegerField(null=True)
    temp_c = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    power_limit_w = models.FloatField(null=True)
    sm_clock_mhz = models.IntegerField(null=True)
    mem_clock_mhz = models.IntegerField(null=True)
    throttle_reasons = models.BigIntegerField(null=True, help_text="NVML clocks-event-reasons bitmask.")
    ecc_corrected_volatile = models.BigIntegerField(null=True)
    ecc_uncorrected_volatile = models.BigIntegerField(null=True)
    ecc_corrected_aggregate = models.BigIntegerField(null=True)
    ecc_uncorrected_aggregate = models.BigIntegerField(null=True)
    retired_pages_pending = models.BooleanField(null=True)
    remapped_rows_pending = models.BooleanField(null=True)
    remapped_rows_failed = models.BooleanField(null=True)
    remapped_rows_correctable = models.BigIntegerField(null=True)
    remapped_rows_uncorrectable = models.BigIntegerField(null=True)
    pcie_replay_count = models.BigIntegerField(null=True)
    nvlink_crc_errors = models.BigIntegerField(null=True)
    nvlink_replay_errors = models.BigIntegerField(null=True)
    nvlink_recovery_errors = models.BigIntegerField(null=True)
    pcie_tx_kbps = models.BigIntegerField(null=True)
    pcie_rx_kbps = models.BigIntegerField(null=True)
    nvlink_tx_kbps = models.BigIntegerField(null=True)
    nvlink_rx_kbps = models.BigIntegerField(null=True)
    recovery_action = models.SmallIntegerField(null=True, help_text="NVML_FI_DEV_GET_GPU_RECOVERY_ACTION.")
    received_at = models.DateTimeField(help_text="When the server stored the batch holding this sample.")

    class Meta:
        abstract = True


class LatestGpuSampleQuerySet(models.QuerySet["LatestGpuSample"]):
    def node_summaries(self) -> dict[int, dict[str, Any]]:
        """Each node's newest reading in brief, by node id: ``util_gpu_mean`` (%), ``power_w_total``
        (W), ``temp_c_max`` (°C) and ``ts`` (the newest sample's time), as the live fleet stream
        summarises a sample (values a GPU does not report are left out; all missing: None). One query."""
        rows = (
            self.values("node_id")
            .annotate(
                util_gpu_mean=Avg("util_gpu"), power_w_total=Sum("power_w"), temp_c_max=Max("temp_c"), ts=Max("ts")
            )
            .order_by()
        )
        return {row.pop("node_id"): row for row in rows}


class LatestGpuSample(GpuMetrics):
    """The newest sample of each GPU: what /metrics and the fleet view read without touching the
    raw table. Upserted by the writer in the same transaction as the raw rows, every 5 s of sample
    time per node (ingest.LATEST_REFRESH_S); a row never moves back in time (a replay leaves it).

    A table rather than Redis: at 1,000 nodes that is 1,600 row updates a second, staged by COPY and
    upserted in one statement per batch (~10-20 ms of a 2-core database per second, HOT updates,
    UNLOGGED on PostgreSQL so no WAL); Redis would take 8,000 pipelined writes a second from the
    ingest process, could disagree with the committed rows, and would make /metrics read 8,000
    hashes instead of one indexed join with the inventory.
    """

    pk = models.CompositePrimaryKey("node", "gpu_index")
    node = node_without_constraint(on_delete=models.CASCADE, related_name="latest_gpu_samples")

    objects = LatestGpuSampleQuerySet.as_manager()

    def __str__(self) -> str:
        return f"latest node {self.node_id} gpu{self.gpu_index}"


class PortReading(models.Model):
    """One InfiniBand/RoCE port's reading, as the agent's ``PortSample`` carries it."""

    ts = models.DateTimeField()
    device = models.CharField(max_length=32, help_text="e.g. mlx5_0")
    port = models.SmallIntegerField()
    state = models.CharField(max_length=8)
    rate_gbps = models.FloatField(null=True)
    tx_gbps = models.FloatField(null=True)
    rx_gbps = models.FloatField(null=True)
    symbol_errors = models.BigIntegerField(null=True)
    link_downed = models.BigIntegerField(null=True)
    rcv_errors = models.BigIntegerField(null=True)
    tx_bytes = models.BigIntegerField(null=True, help_text="Data sent since the HCA's counters were reset.")
    rx_bytes = models.BigIntegerField(null=True, help_text="Data received since the HCA's counters were reset.")
    received_at = models.DateTimeField()

    class Meta:
        abstract = True


class LatestPortSample(PortReading):
    """The newest sample of each port, kept as LatestGpuSample is (same writer, same refresh, same
    never-back-in-time rule): the topology page and the node page read the fleet's or a node's ports
    in one query instead of looking for each port's newest raw sample."""

    pk = models.CompositePrimaryKey("node", "device", "port")
    node = node_without_constraint(on_delete=models.CASCADE, related_name="latest_port_samples")

    def __str__(self) -> str:
        return f"latest node {self.node_id} {self.device}/{self.port}"
