"""Where telemetry lands: raw samples, rollups, the newest sample of each GPU, and ingest cursors.

Volumes at the 1,000-node scale (8 GPUs each, one sample a second) set the shape:

- Raw samples arrive at 8,000 rows/s and live 48 h (about 1.4 billion rows); 1-minute rollups live
  90 days (about 1 billion rows). These tables have no foreign-key constraint to ``inventory_node``:
  a constraint would fire a lookup trigger for every copied row, and deleting a node would cascade
  through a billion rows inside one request. Rows of a deleted node simply age out with retention.
  Small per-node tables (cursor, newest sample, hourly rollups) cascade in the ORM when a node is
  deleted, still without a database constraint, so a node deleted mid-batch cannot fail the
  transaction that also carries every other node's samples.
- Raw tables carry one B-tree, (node, ts), for the chart query; PostgreSQL also gets a BRIN index on
  ts (and on received_at) for retention and rollups (see migration 0002): a few pages instead of a
  second B-tree on every insert.
- Rollup and latest tables use their natural key as a composite primary key (no surrogate id, no
  second index). The key order (node, bucket, gpu) serves "this node's last 24 hours" as one range.
- No uniqueness on raw rows: an agent whose clock steps back may repeat a timestamp, and one such
  row must never poison a whole batch. Duplicates are prevented upstream by the per-node sequence
  cursor (TelemetryCursor), advanced in the same transaction as the rows.
"""

from datetime import datetime
from typing import Any

from django.db import models, transaction
from django.db.models import Avg, Max, Sum

from apps.inventory.models import Node

# Fields of ``agents.protocol.GpuSample`` (after ``index``), in the protocol's order: the writer
# copies ``msgspec.structs.astuple(sample)`` straight into these columns. tests/telemetry checks
# that model and protocol agree.
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
# The metrics that are rolled up and charted: (field, unit).
ROLLUP_METRICS: dict[str, str] = {
    "util_gpu": "%",
    "util_mem": "%",
    "power_w": "W",
    "temp_c": "°C",
    "sm_clock_mhz": "MHz",
    "mem_used_mib": "MiB",
}


def _node_without_constraint(*, on_delete: object, related_name: str) -> models.ForeignKey:
    return models.ForeignKey(Node, on_delete=on_delete, db_constraint=False, related_name=related_name, db_index=False)


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


class GpuSample(GpuMetrics):
    """Raw GPU samples, kept ``TELEMETRY_RAW_RETENTION_HOURS``. Written only by storage.write_batch."""

    node = _node_without_constraint(on_delete=models.DO_NOTHING, related_name="+")

    class Meta:
        indexes = [models.Index(fields=["node", "ts"], name="gpusample_node_ts")]

    def __str__(self) -> str:
        return f"node {self.node_id} gpu{self.gpu_index} @ {self.ts:%Y-%m-%d %H:%M:%S}"


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
    node = _node_without_constraint(on_delete=models.CASCADE, related_name="latest_gpu_samples")

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


class PortSample(PortReading):
    """Raw InfiniBand/RoCE port samples, kept as long as raw GPU samples."""

    node = _node_without_constraint(on_delete=models.DO_NOTHING, related_name="+")

    class Meta:
        indexes = [models.Index(fields=["node", "ts"], name="portsample_node_ts")]

    def __str__(self) -> str:
        return f"node {self.node_id} {self.device}/{self.port} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class LatestPortSample(PortReading):
    """The newest sample of each port, kept as LatestGpuSample is (same writer, same refresh, same
    never-back-in-time rule): the topology page and the node page read the fleet's or a node's ports
    in one query instead of looking for each port's newest raw sample."""

    pk = models.CompositePrimaryKey("node", "device", "port")
    node = _node_without_constraint(on_delete=models.CASCADE, related_name="latest_port_samples")

    def __str__(self) -> str:
        return f"latest node {self.node_id} {self.device}/{self.port}"


class TelemetryCursorQuerySet(models.QuerySet["TelemetryCursor"]):
    def reset(self, node_id: int, telemetry_seq: int, events_seq: int, now: datetime) -> tuple[int, int]:
        """Set the node's stored seqs (a new epoch: what the agent sends next is new from there on);
        return what they were."""
        with transaction.atomic():
            cursor = self.select_for_update().filter(node_id=node_id).first()
            before = (cursor.telemetry_seq, cursor.events_seq) if cursor else (0, 0)
            self.update_or_create(
                node_id=node_id,
                defaults={"telemetry_seq": telemetry_seq, "events_seq": events_seq, "updated_at": now},
            )
        return before


class TelemetryCursor(models.Model):
    """The highest message seq stored per node and stream. Advanced in the same transaction as
    the rows, so "seq <= cursor" means "already stored": that is the whole dedup. An admin, or a
    node's new credential, resets it (``reset``)."""

    node = models.OneToOneField(
        Node, on_delete=models.CASCADE, primary_key=True, db_constraint=False, related_name="telemetry_cursor"
    )
    telemetry_seq = models.BigIntegerField(default=0)
    events_seq = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField()

    objects = TelemetryCursorQuerySet.as_manager()

    def __str__(self) -> str:
        return f"node {self.node_id}: telemetry {self.telemetry_seq}, events {self.events_seq}"


class GpuRollup(models.Model):
    """min/mean/max of the charted metrics over one bucket of one GPU.

    Minute and hour rollups are two tables, not one with a resolution column: their sizes differ a
    hundredfold, their retention differs (90 days, forever), and each chart reads exactly one.
    ``sample_count`` weighs the minute means when they are rolled into an hour.
    """

    bucket = models.DateTimeField(help_text="Start of the bucket (UTC).")
    gpu_index = models.SmallIntegerField()
    sample_count = models.IntegerField()
    util_gpu_min = models.FloatField(null=True)
    util_gpu_mean = models.FloatField(null=True)
    util_gpu_max = models.FloatField(null=True)
    util_mem_min = models.FloatField(null=True)
    util_mem_mean = models.FloatField(null=True)
    util_mem_max = models.FloatField(null=True)
    power_w_min = models.FloatField(null=True)
    power_w_mean = models.FloatField(null=True)
    power_w_max = models.FloatField(null=True)
    temp_c_min = models.FloatField(null=True)
    temp_c_mean = models.FloatField(null=True)
    temp_c_max = models.FloatField(null=True)
    sm_clock_mhz_min = models.FloatField(null=True)
    sm_clock_mhz_mean = models.FloatField(null=True)
    sm_clock_mhz_max = models.FloatField(null=True)
    mem_used_mib_min = models.FloatField(null=True)
    mem_used_mib_mean = models.FloatField(null=True)
    mem_used_mib_max = models.FloatField(null=True)

    class Meta:
        abstract = True


class GpuMinuteRollup(GpuRollup):
    pk = models.CompositePrimaryKey("node", "bucket", "gpu_index")
    node = _node_without_constraint(on_delete=models.DO_NOTHING, related_name="+")

    class Meta:
        # The fleet's last hour (queries.fleet_history) reads every node's minutes: by bucket.
        indexes = [models.Index(fields=["bucket"], name="gpuminuterollup_bucket")]

    def __str__(self) -> str:
        return f"node {self.node_id} gpu{self.gpu_index} minute {self.bucket:%Y-%m-%d %H:%M}"


class GpuHourRollup(GpuRollup):
    pk = models.CompositePrimaryKey("node", "bucket", "gpu_index")
    node = _node_without_constraint(on_delete=models.CASCADE, related_name="gpu_hour_rollups")

    def __str__(self) -> str:
        return f"node {self.node_id} gpu{self.gpu_index} hour {self.bucket:%Y-%m-%d %H:00}"


class RollupProgress(models.Model):
    """How far each rollup has got, so a task that missed runs catches up and late data (an
    agent replaying an hour of backlog) is rolled up too.

    ``minute``: raw rows *received* before ``position`` are rolled up. ``hour``: hours starting
    before ``position`` are rolled up.
    """

    name = models.CharField(max_length=16, primary_key=True)
    position = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} rollup up to {self.position:%Y-%m-%d %H:%M:%S}"


class AgentEvent(models.Model):
    """An event an agent reported (XID, ECC, thermal, PCIe, NVLink, port), stored as received.
    Turning events into failures is the failures module's job; this is the record it reads."""

    node = _node_without_constraint(on_delete=models.DO_NOTHING, related_name="+")
    ts = models.DateTimeField()
    kind = models.CharField(max_length=16)
    gpu_index = models.SmallIntegerField(null=True)
    port_device = models.CharField(max_length=128, blank=True)
    xid = models.SmallIntegerField(null=True)
    data = models.TextField(blank=True)
    received_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["node", "ts"], name="agentevent_node_ts")]

    def __str__(self) -> str:
        return f"node {self.node_id} {self.kind} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class LatestXid(models.Model):
    """The last XID each GPU reported, for ``DCGM_FI_DEV_XID_ERRORS`` (one row per GPU)."""

    pk = models.CompositePrimaryKey("node", "gpu_index")
    node = _node_without_constraint(on_delete=models.CASCADE, related_name="latest_xids")
    gpu_index = models.SmallIntegerField()
    xid = models.SmallIntegerField()
    ts = models.DateTimeField()

    def __str__(self) -> str:
        return f"node {self.node_id} gpu{self.gpu_index} XID {self.xid}"


class XidCount(models.Model):
    """How many times each GPU reported each XID, ever, for ``controlplane_gpu_xid_errors_total``.
    Counted as the events are stored, under the node's events cursor lock: a replay counts nothing twice."""

    pk = models.CompositePrimaryKey("node", "gpu_index", "xid")
    node = _node_without_constraint(on_delete=models.CASCADE, related_name="xid_counts")
    gpu_index = models.SmallIntegerField()
    xid = models.SmallIntegerField()
    count = models.BigIntegerField()
    last_ts = models.DateTimeField()

    def __str__(self) -> str:
        return f"node {self.node_id} gpu{self.gpu_index} XID {self.xid}: {self.count}"


class IngestProcess(models.Model):
    """One server process's ingest totals, written by its ingestor every few seconds
    (ingest.HEALTH_WRITE_S), so that whichever process Prometheus reaches exports every process's."""

    process = models.CharField(max_length=128, primary_key=True, help_text="host:pid")
    updated_at = models.DateTimeField()
    messages = models.BigIntegerField(help_text="Telemetry messages stored.")
    gpu_samples = models.BigIntegerField()
    port_samples = models.BigIntegerField()
    duplicates = models.BigIntegerField(help_text="Messages dropped as already stored (an agent's replay).")
    failed_batches = models.BigIntegerField(help_text="Batches the database refused (their agents resend).")
    pending_rows = models.IntegerField(help_text="Rows waiting for the writer when this was written.")
    lag_s = models.FloatField(null=True, help_text="Age of the freshest sample of the last batch, when stored.")
    write_s = models.FloatField(null=True, help_text="How long the last batch took to write.")

    def __str__(self) -> str:
        return f"ingest of {self.process}"
