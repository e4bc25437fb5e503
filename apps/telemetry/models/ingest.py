"""What an agent's events left behind (the events as received, each GPU's last XID and XID counts),
each node's ingest cursor, and each server process's ingest totals."""

import json
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from apps.inventory.models import Node
from apps.telemetry.models.base import node_without_constraint


class TelemetryCursor(models.Model):
    """The highest message seq stored per node and stream, advanced in the same transaction as the
    rows, so "seq <= cursor" means "already stored": that is the whole dedup. On PostgreSQL a node's
    telemetry seq is this row's joined with the log of the batches since the last fold
    (apps/telemetry/seqlog.py): read it with ``cursors.stored_seqs``. An admin, or a node's new
    credential, resets both (``cursors.reset_seqs``)."""

    node = models.OneToOneField(
        Node, on_delete=models.CASCADE, primary_key=True, db_constraint=False, related_name="telemetry_cursor"
    )
    telemetry_seq = models.BigIntegerField(default=0)
    events_seq = models.BigIntegerField(default=0)
    telemetry_seq_before = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="The telemetry seq before the writer's last advance: what its claim on SQLite returns "
        "(apps/telemetry/cursors.py).",
    )
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"node {self.node_id}: telemetry {self.telemetry_seq}, events {self.events_seq}"


class BigIntArrayField(models.Field):
    """``bigint[]`` on PostgreSQL, where the cursors' log is folded and read in SQL (unnest); JSON text
    elsewhere (SQLite keeps the per-node claim and writes no log)."""

    def db_type(self, connection: BaseDatabaseWrapper) -> str:
        return "bigint[]" if connection.vendor == "postgresql" else "text"

    def get_db_prep_value(self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False) -> Any:
        if value is None or connection.vendor == "postgresql":
            return value
        return json.dumps([int(item) for item in value])

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> list[int] | None:
        return json.loads(value) if isinstance(value, str) else value


class TelemetrySeqLog(models.Model):
    """One telemetry batch's nodes and the seqs it advanced them to, on PostgreSQL, until a writer
    folds it into TelemetryCursor (apps/telemetry/seqlog.py)."""

    id = models.BigAutoField(primary_key=True)
    node_ids = BigIntArrayField()
    seqs = BigIntArrayField()

    class Meta:
        db_table = "telemetry_seqlog"

    def __str__(self) -> str:
        return f"cursors' log row {self.id}: {len(self.node_ids)} nodes"


class TelemetrySeqLogState(models.Model):
    """The cursors' log's one row (id 1): the last log row folded into TelemetryCursor, and a count of
    resets, which starts anywhere (a recreated row never matches what a writer remembers)."""

    id = models.SmallIntegerField(primary_key=True, default=1)
    folded_through = models.BigIntegerField()
    resets = models.BigIntegerField()

    class Meta:
        db_table = "telemetry_seqlog_state"

    def __str__(self) -> str:
        return f"cursors' log folded through row {self.folded_through}, {self.resets} resets"


class AgentEvent(models.Model):
    """An event an agent reported (XID, ECC, thermal, PCIe, NVLink, port), stored as received.
    Turning events into failures is the failures module's job; this is the record it reads."""

    node = node_without_constraint(on_delete=models.DO_NOTHING, related_name="+")
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
    node = node_without_constraint(on_delete=models.CASCADE, related_name="latest_xids")
    gpu_index = models.SmallIntegerField()
    xid = models.SmallIntegerField()
    ts = models.DateTimeField()

    def __str__(self) -> str:
        return f"node {self.node_id} gpu{self.gpu_index} XID {self.xid}"


class XidCount(models.Model):
    """How many times each GPU reported each XID, ever, for ``controlplane_gpu_xid_errors_total``.
    Counted as the events are stored, under the node's events cursor lock: a replay counts nothing twice."""

    pk = models.CompositePrimaryKey("node", "gpu_index", "xid")
    node = node_without_constraint(on_delete=models.CASCADE, related_name="xid_counts")
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
