"""Chart queries: one node's GPUs over the last 15 minutes, 24 hours or 30 days.

Each window reads the coarsest table that still has the detail it shows (raw samples, minute
rollups, hourly rollups) through the (node, time) index, and merges the rows into at most ~360
points per GPU: min of mins, max of maxes, and means weighted by sample count, so a point says
exactly what the samples under it said.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Model

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


@dataclass
class _Point:
    low: float
    high: float
    weighted_sum: float
    count: int

    def add(self, low: float, mean: float, high: float, count: int) -> None:
        self.low, self.high = min(self.low, low), max(self.high, high)
        self.weighted_sum += mean * count
        self.count += count


def node_series(node_id: int, window: Window, metric: str, *, now: datetime) -> dict[str, Any]:
    """``{"start", "end", "step_s", "gpus": [{"index", "points": [[t, min, mean, max], ...]}]}``,
    ``t`` in Unix seconds at the start of each point's interval; GPUs without data are left out."""
    if metric not in METRICS:
        raise ValueError(f"Unknown metric {metric!r}")
    start = now - window.span
    if window.source is GpuSample:
        rows = (
            GpuSample.objects.filter(node_id=node_id, ts__gte=start, ts__lte=now, **{f"{metric}__isnull": False})
            .values_list("gpu_index", "ts", metric)
            .order_by()
        )
        weighted = ((gpu, ts, value, value, value, 1) for gpu, ts, value in rows.iterator(chunk_size=10_000))
    else:
        rows = (
            window.source.objects.filter(
                node_id=node_id, bucket__gte=start, bucket__lte=now, **{f"{metric}_mean__isnull": False}
            )
            .values_list("gpu_index", "bucket", f"{metric}_min", f"{metric}_mean", f"{metric}_max", "sample_count")
            .order_by()
        )
        weighted = iter(rows.iterator(chunk_size=10_000))
    step = window.step.total_seconds()
    points: dict[int, dict[float, _Point]] = {}
    for gpu, moment, low, mean, high, count in weighted:
        t = moment.timestamp() // step * step
        point = points.setdefault(gpu, {}).get(t)
        if point is None:
            points[gpu][t] = _Point(low, high, mean * count, count)
        else:
            point.add(low, mean, high, count)
    return {
        "start": start,
        "end": now,
        "step_s": int(step),
        "gpus": [
            {
                "index": gpu,
                "points": [[int(t), p.low, p.weighted_sum / p.count, p.high] for t, p in sorted(points[gpu].items())],
            }
            for gpu in sorted(points)
        ],
    }
