"""Chart queries: one node's GPUs over the last 15 minutes, 24 hours or 30 days; the fleet's last hour;
and the raw series of a window, for the straggler search.

Each window reads the coarsest table that still has the detail it shows (raw samples, minute
rollups, hourly rollups) through its (node, time) index: one row per node and sample or bucket, about
900, 1,440 or 720 rows whatever the node's GPU count. Only the fields charted are unpacked, in their
stored integers, and merged into at most ~360 points per GPU: min of mins, max of maxes, and means
from sums and counts, so a point says exactly what the samples under it said.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import groupby
from typing import Any

from django.db.models import BigIntegerField, F, Func, Model, Sum, Value

from apps.telemetry.models import (
    GPU_PACKING,
    ROLLUP_METRICS,
    ROLLUP_PACKING,
    ROLLUP_STATS,
    NodeGpuSample,
    NodeHourRollup,
    NodeMinuteRollup,
)
from apps.telemetry.packed_fields import Field


@dataclass(frozen=True)
class Window:
    name: str
    span: timedelta
    source: type[Model]
    step: timedelta  # spacing of the points returned

    @property
    def source_name(self) -> str:
        return {NodeGpuSample: "raw", NodeMinuteRollup: "minute", NodeHourRollup: "hour"}[self.source]


WINDOWS: dict[str, Window] = {
    w.name: w
    for w in (
        Window("15m", timedelta(minutes=15), NodeGpuSample, timedelta(seconds=3)),  # 300 points from 1 s samples
        Window("24h", timedelta(hours=24), NodeMinuteRollup, timedelta(minutes=5)),  # 288 points
        Window("30d", timedelta(days=30), NodeHourRollup, timedelta(hours=2)),  # 360 points
    )
}
METRICS = ROLLUP_METRICS
_INDEX = GPU_PACKING.position("index")


def metric_field(metric: str) -> Field:
    """How ``metric`` is stored: the raw field whose steps a rollup's minimums, sums and maximums are in."""
    return GPU_PACKING.fields[GPU_PACKING.position(metric)]


def in_units(field: Field, stored: float) -> float:
    """A stored value (or a mean of them) back in the metric's units."""
    return (stored + field.offset) / field.steps


class UnixSeconds(Func):
    """A time in whole Unix seconds (rounded down), worked out by the database: a chart reads up to
    1,440 rows, and parsing each row's time into a datetime first cost more than the rest of the row."""

    output_field = BigIntegerField()
    template = "CAST(FLOOR(EXTRACT(EPOCH FROM %(expressions)s)) AS bigint)"

    def __init__(self, column: str) -> None:
        super().__init__(F(column))

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # strftime's format as a parameter: a literal % would have to survive two rounds of escaping.
        self.set_source_expressions([Value("%s"), *self.get_source_expressions()[-1:]])
        return self.as_sql(compiler, connection, template="CAST(strftime(%(expressions)s) AS INTEGER)", **extra)


Stats = tuple[int, int, int, int]  # min, sum, count, max of stored values


def _merged(stats: list[Stats]) -> Stats:
    """One point's stats from those of the samples (or buckets) under it."""
    if len(stats) == 1:
        return stats[0]
    lows, totals, counts, highs = zip(*stats, strict=True)
    return min(lows), sum(totals), sum(counts), max(highs)


def _series(cells: dict[tuple[int, int], Stats], field: Field) -> list[dict[str, Any]]:
    """``[{"index", "points": [[t, min, mean, max], ...]}]`` in the metric's units, from the stats of
    each (GPU, point start); in_units inlined, as it runs 7,000 times per chart."""
    offset, steps = field.offset, field.steps
    return [
        {
            "index": gpu,
            "points": [
                [t, (low + offset) / steps, (total / count + offset) / steps, (high + offset) / steps]
                for (_, t), (low, total, count, high) in points
            ],
        }
        for gpu, points in groupby(sorted(cells.items()), key=lambda cell: cell[0][0])
    ]


def node_series(node_id: int, window: Window, metric: str, *, now: datetime) -> dict[str, Any]:
    """``{"start", "end", "step_s", "gpus": [{"index", "points": [[t, min, mean, max], ...]}]}``,
    ``t`` in Unix seconds at the start of each point's interval; GPUs without data are left out.

    The rows' values are gathered by (GPU, point start), then each point is reduced once with the
    builtins (min, sum, max over a few values), not merged value by value."""
    if metric not in METRICS:
        raise ValueError(f"Unknown metric {metric!r}")
    start, step = now - window.span, int(window.step.total_seconds())
    if window.source is NodeGpuSample:
        rows = NodeGpuSample.objects.filter(node_id=node_id, ts__gte=start, ts__lte=now)
        wanted = (_INDEX, GPU_PACKING.position(metric))
        values: defaultdict[tuple[int, int], list[int]] = defaultdict(list)
        for seconds, packed in rows.values_list(UnixSeconds("ts"), "gpus").order_by():
            _, (indices, column) = GPU_PACKING.columns(packed, wanted, stored=True)
            if column is None:
                continue
            t = seconds // step * step
            for gpu, value in zip(indices, column, strict=True):
                if value is not None:
                    values[gpu, t].append(value)
        cells = {cell: (min(v), sum(v), len(v), max(v)) for cell, v in values.items()}
    else:
        rows = window.source.objects.filter(node_id=node_id, bucket__gte=start, bucket__lte=now)
        wanted = tuple(ROLLUP_PACKING.position(name) for name in ("index", *(f"{metric}_{s}" for s in ROLLUP_STATS)))
        buckets: defaultdict[tuple[int, int], list[Stats]] = defaultdict(list)
        for seconds, packed in rows.values_list(UnixSeconds("bucket"), "gpus").order_by():
            _, (indices, counts, lows, totals, highs) = ROLLUP_PACKING.columns(packed, wanted, stored=True)
            if counts is None:
                continue
            t = seconds // step * step
            for gpu, count, low, total, high in zip(indices, counts, lows, totals, highs, strict=True):
                if count:
                    buckets[gpu, t].append((low, total, count, high))
        cells = {cell: _merged(stats) for cell, stats in buckets.items()}
    return {"start": start, "end": now, "step_s": step, "gpus": _series(cells, metric_field(metric))}


FLEET_HISTORY_SPAN = timedelta(hours=1)


def fleet_history(*, now: datetime, span: timedelta = FLEET_HISTORY_SPAN) -> list[dict[str, Any]]:
    """The whole fleet minute by minute over the last ``span``, from the minute rollups:
    ``[{"ts", "gpus", "util_gpu_mean", "power_w_total"}]``, oldest first.

    ``util_gpu_mean`` is the mean over every sample of every GPU in the minute; ``power_w_total`` the
    sum of the GPUs' mean draw, the fleet's load in that minute. The minutes still settling (see
    rollups.py) are not there yet: a live page adds them from the stream. One query, summing each
    node-minute's derived columns (~1,000 rows a minute at 1,000 nodes).
    """
    rows = (
        NodeMinuteRollup.objects.filter(bucket__gte=now - span, bucket__lte=now)
        .values("bucket")
        .annotate(
            gpus=Sum("_gpus"),
            util_total=Sum("_util_gpu_total"),
            util_samples=Sum("_util_gpu_samples"),
            power_w_total=Sum("_power_w_total"),
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


def gpu_series(
    since: datetime, until: datetime, metrics: Iterable[str]
) -> dict[tuple[int, int], dict[str, list[float | None]]]:
    """Every GPU's raw values of ``metrics`` in [since, until), by (node, GPU index) and metric (None
    where a sample did not report the metric), in no particular order."""
    metrics = list(metrics)
    wanted = [_INDEX, *(GPU_PACKING.position(metric) for metric in metrics)]
    series: dict[tuple[int, int], dict[str, list[float | None]]] = {}
    rows = NodeGpuSample.objects.filter(ts__gte=since, ts__lt=until).order_by()
    for node_id, packed in rows.values_list("node_id", "gpus").iterator(chunk_size=10_000):
        _, (indices, *columns) = GPU_PACKING.columns(packed, wanted)
        for i, gpu in enumerate(indices or ()):
            gpu_series = series.get((node_id, gpu))
            if gpu_series is None:
                gpu_series = series[node_id, gpu] = {metric: [] for metric in metrics}
            for metric, column in zip(metrics, columns, strict=True):
                gpu_series[metric].append(column[i] if column is not None else None)
    return series
