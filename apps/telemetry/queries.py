"""Chart queries: one node's GPUs over the last 15 minutes, 24 hours or 30 days.

Each window reads the coarsest table that still has the detail it shows (raw samples, minute
rollups, hourly rollups) through the (node, time) index, and merges the rows into at most ~360
points per GPU: min of mins, max of maxes, and means weighted by sample count, so a point says
exactly what the samples under it said.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import BigIntegerField, Case, Count, F, FloatField, Func, Max, Min, Model, Sum, When

from apps.telemetry.models import ROLLUP_METRICS, GpuHourRollup, GpuMinuteRollup, GpuSample


@dataclass(frozen=True)
class Window:
    name: str
    span: timedelta
    source: type[Model]
    step: timedelta  # spacing of the points returned

    @property
    def source_name(self) -> str:
        return {GpuSample: "raw", GpuMinuteRollup: "minute", GpuHourRollup: "hour"}[self.source]


WINDOWS: dict[str, Window] = {
    w.name: w
    for w in (
        Window("15m", timedelta(minutes=15), GpuSample, timedelta(seconds=3)),  # 300 points from 1 s samples
        Window("24h", timedelta(hours=24), GpuMinuteRollup, timedelta(minutes=5)),  # 288 points
        Window("30d", timedelta(days=30), GpuHourRollup, timedelta(hours=2)),  # 360 points
    )
}
METRICS = ROLLUP_METRICS


class EpochBucket(Func):
    """Start of the ``step``-second interval holding a timestamp, in whole Unix seconds."""

    output_field = BigIntegerField()

    def __init__(self, expression: str, step: int) -> None:
        super().__init__(expression)
        self.step = int(step)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        sql, params = compiler.compile(self.source_expressions[0])
        # date_part (double precision) is several times cheaper than EXTRACT (numeric); whole
        # seconds, then integer division, keep the bucket edges exact.
        return f"(floor(date_part('epoch', {sql}))::bigint / {self.step} * {self.step})", params

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        # Django stores UTC text; julianday is exact to well under a millisecond, so rounding to
        # whole milliseconds before the integer division gives the exact second.
        sql, params = compiler.compile(self.source_expressions[0])
        millis = f"CAST(ROUND((julianday({sql}) - 2440587.5) * 86400000) AS INTEGER)"
        return f"({millis} / 1000 / {self.step} * {self.step})", params


def node_series(node_id: int, window: Window, metric: str, *, now: datetime) -> dict[str, Any]:
    """``{"start", "end", "step_s", "gpus": [{"index", "points": [[t, min, mean, max], ...]}]}``,
    ``t`` in Unix seconds at the start of each point's interval; GPUs without data are left out.

    The database does the merging (one indexed range scan, grouped), so only the points cross the
    wire: about 2,400 rows for 8 GPUs whatever the window.
    """
    if metric not in METRICS:
        raise ValueError(f"Unknown metric {metric!r}")
    start, step = now - window.span, int(window.step.total_seconds())
    if window.source is GpuSample:
        rows = GpuSample.objects.filter(node_id=node_id, ts__gte=start, ts__lte=now, **{f"{metric}__isnull": False})
        time_column, merged = "ts", {"low": Min(metric), "high": Max(metric), "total": Sum(metric), "n": Count(metric)}
    else:
        mean = f"{metric}_mean"
        rows = window.source.objects.filter(
            node_id=node_id, bucket__gte=start, bucket__lte=now, **{f"{mean}__isnull": False}
        )
        time_column, merged = (
            "bucket",
            {
                "low": Min(f"{metric}_min"),
                "high": Max(f"{metric}_max"),
                "total": Sum(F(mean) * F("sample_count"), output_field=FloatField()),
                "n": Sum("sample_count"),
            },
        )
    points = (
        rows.annotate(t=EpochBucket(time_column, step))
        .values("gpu_index", "t")
        .annotate(**merged)
        .order_by("gpu_index", "t")
        .values_list("gpu_index", "t", "low", "total", "n", "high")
    )
    series: dict[int, list[list[float]]] = {}
    for gpu, t, low, total, n, high in points:
        series.setdefault(gpu, []).append([t, low, total / n, high])
    return {
        "start": start,
        "end": now,
        "step_s": step,
        "gpus": [{"index": gpu, "points": series[gpu]} for gpu in sorted(series)],
    }


FLEET_HISTORY_SPAN = timedelta(hours=1)


def fleet_history(*, now: datetime, span: timedelta = FLEET_HISTORY_SPAN) -> list[dict[str, Any]]:
    """The whole fleet minute by minute over the last ``span``, from the minute rollups:
    ``[{"ts", "gpus", "util_gpu_mean", "power_w_total"}]``, oldest first.

    ``util_gpu_mean`` is the mean over every sample of every GPU in the minute; ``power_w_total`` the
    sum of the GPUs' mean draw, the fleet's load in that minute. The minutes still settling (see
    rollups.py) are not there yet: a live page adds them from the stream. One query over the
    (bucket) index: ~8,000 rows a minute at 1,000 nodes.
    """
    rows = (
        GpuMinuteRollup.objects.filter(bucket__gte=now - span, bucket__lte=now)
        .values("bucket")
        .annotate(
            gpus=Count("gpu_index"),
            util_total=Sum(F("util_gpu_mean") * F("sample_count"), output_field=FloatField()),
            util_samples=Sum(Case(When(util_gpu_mean__isnull=False, then="sample_count"), default=0)),
            power_w_total=Sum("power_w_mean"),
        )
        .order_by("bucket")
    )
    return [
        {
            "ts": int(row["bucket"].timestamp()),
            "gpus": row["gpus"],
            "util_gpu_mean": row["util_total"] / row["util_samples"] if row["util_samples"] else None,
            "power_w_total": row["power_w_total"],
        }
        for row in rows
    ]
