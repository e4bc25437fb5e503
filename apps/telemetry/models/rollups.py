"""Rollups in the compact layout: one row per node and bucket (a minute, an hour), the node's GPUs
packed into one value, each GPU with, for each charted metric, how many samples had it and their
minimum, sum and maximum (in the metric's stored steps, so sums and means are exact).

Minute rows live ``TELEMETRY_MINUTE_RETENTION_DAYS`` in daily partitions on PostgreSQL; hour rows are
kept. The ``_``-prefixed columns are derived from ``gpus`` for the fleet's history (queries.fleet_history),
which reads every node's minutes and would otherwise unpack 60,000 values an hour.
"""

from django.db import models

from apps.telemetry.models.base import PartitionedQuerySet, node_without_constraint
from apps.telemetry.packed_fields import Field
from apps.telemetry.packing import Packing

# The metrics that are rolled up and charted: (field, unit).
ROLLUP_METRICS: dict[str, str] = {
    "util_gpu": "%",
    "util_mem": "%",
    "power_w": "W",
    "temp_c": "°C",
    "sm_clock_mhz": "MHz",
    "mem_used_mib": "MiB",
}
ROLLUP_STATS: tuple[str, ...] = ("n", "min", "sum", "max")
ROLLUP_FIELDS: tuple[str, ...] = (
    "index",
    "samples",  # samples of the GPU in the bucket, whatever they reported
    *(f"{metric}_{stat}" for metric in ROLLUP_METRICS for stat in ROLLUP_STATS),
)
ROLLUP_PACKING = Packing([Field(name, int) for name in ROLLUP_FIELDS])


class NodeRollup(models.Model):
    bucket = models.DateTimeField(help_text="Start of the bucket (UTC).")
    gpus = models.BinaryField(help_text="Each GPU's counts, minimums, sums and maximums, packed (ROLLUP_PACKING).")
    _gpus = models.SmallIntegerField(help_text="GPUs that reported in the bucket.")
    _util_gpu_total = models.FloatField(null=True, help_text="Sum of util_gpu over every sample of every GPU, %.")
    _util_gpu_samples = models.IntegerField(help_text="Samples that reported util_gpu.")
    _power_w_total = models.FloatField(null=True, help_text="Sum of the GPUs' mean power draw, W.")

    class Meta:
        abstract = True


class NodeMinuteRollup(NodeRollup):
    PARTITIONED_BY = "bucket"

    pk = models.CompositePrimaryKey("node", "bucket")
    node = node_without_constraint(on_delete=models.DO_NOTHING, related_name="+")

    objects = PartitionedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"node {self.node_id} minute {self.bucket:%Y-%m-%d %H:%M}"


class NodeHourRollup(NodeRollup):
    pk = models.CompositePrimaryKey("node", "bucket")
    node = node_without_constraint(on_delete=models.CASCADE, related_name="hour_rollups")

    def __str__(self) -> str:
        return f"node {self.node_id} hour {self.bucket:%Y-%m-%d %H:00}"


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
