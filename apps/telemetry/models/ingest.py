"""What an agent's events left behind (the events as received, each GPU's last XID and XID counts),
each node's ingest cursor, and each server process's ingest totals."""

from datetime import datetime

from django.db import models, transaction

from apps.inventory.models import Node
from apps.telemetry.models.base import node_without_constraint


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
    telemetry_seq_before = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="The telemetry seq before the writer's last advance: what its one-statement claim returns "
        "(apps/telemetry/cursors.py).",
    )
    updated_at = models.DateTimeField()

    objects = TelemetryCursorQuerySet.as_manager()

    def __str__(self) -> str:
        return f"node {self.node_id}: telemetry {self.telemetry_seq}, events {self.events_seq}"


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
