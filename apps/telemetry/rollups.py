"""Rollups (raw → 1 minute → 1 hour), as plain functions; tasks.py schedules them.

Rolling a window is idempotent: its buckets are recomputed from the source and written over what
was there (an upsert per node and bucket), so re-running a window gives the same rows. The source's
rows are read once, in order, and only the charted fields are unpacked, as stored integers: a
bucket's counts, minimums, sums and maximums are exact, and an hour made of minutes says what its
raw samples said. A window is never recomputed from a source that retention has already thinned (the
start is clamped to the source's horizon), or a re-run would erase rollups.

Late data is expected: an agent that was cut off for an hour replays its backlog. The minute pass
is therefore driven by when rows were *received*, not by their timestamps: every run finds the
nodes and time ranges that received rows since the last run and recomputes exactly those
minutes, then the already-rolled hours they fall in.
"""

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Max, Min
from django.utils import timezone

from apps.telemetry.models import (
    GPU_PACKING,
    ROLLUP_METRICS,
    ROLLUP_PACKING,
    NodeGpuSample,
    NodeHourRollup,
    NodeMinuteRollup,
    RollupProgress,
)
from apps.telemetry.packed_fields import Field
from apps.telemetry.partitions import day_of, partition_days
from apps.telemetry.queries import in_units, metric_field

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
# A batch is stamped received_at before its transaction commits; rows received this long ago are
# surely visible. Rows that commit later are still caught: the next run's range starts here.
INGEST_SETTLE = timedelta(seconds=30)
# An hour is rolled up once its last minute rollup is surely done (minute pass: every 60 s + settle).
HOUR_SETTLE = timedelta(minutes=5)
# A pass that fell behind (or the first one, over existing samples) catches up in steps that fit
# its time limit: 30 minutes of received rows (14 million at 1,000 nodes) or 24 hours of hours.
MAX_RECEIVED_PER_RUN = timedelta(minutes=30)
MAX_HOURS_PER_RUN = 24
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def floor_to(moment: datetime, step: timedelta) -> datetime:
    return moment - (moment - _EPOCH) % step


def ceil_to(moment: datetime, step: timedelta) -> datetime:
    floored = floor_to(moment, step)
    return floored if floored == moment else floored + step


def raw_horizon(now: datetime) -> datetime:
    """The oldest whole minute that raw retention has not started to delete."""
    return ceil_to(now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS), MINUTE)


def minute_horizon(now: datetime) -> datetime:
    return ceil_to(now - timedelta(days=settings.TELEMETRY_MINUTE_RETENTION_DAYS), HOUR)


# Rolling windows -------------------------------------------------------------------------------

_METRICS = tuple(ROLLUP_METRICS)
_RAW_FIELDS = [GPU_PACKING.position(name) for name in ("index", *_METRICS)]
Stats = list[Any]  # a GPU's [samples, then n, min, sum, max of each metric]: ROLLUP_FIELDS after "index"


def rollup_minutes(
    since: datetime, until: datetime, *, node_ids: Iterable[int] | None = None, now: datetime | None = None
) -> int:
    """Recompute the 1-minute rollups of [since, until), widened to whole minutes; return rows written."""
    buckets: dict[tuple[int, datetime], dict[int, Stats]] = defaultdict(dict)
    horizon = raw_horizon(now or timezone.now())
    for node_id, bucket, packed in _source(NodeGpuSample, "ts", MINUTE, horizon, since, until, node_ids):
        _, (indices, *columns) = GPU_PACKING.columns(packed, _RAW_FIELDS, stored=True)
        gpus = buckets[node_id, bucket]
        for i, gpu in enumerate(indices or ()):
            stats = _stats(gpus, gpu)
            stats[0] += 1
            for k, column in enumerate(columns):
                value = column[i] if column is not None else None
                if value is not None:
                    _add(stats, 1 + 4 * k, 1, value, value, value)
    return _write(NodeMinuteRollup, buckets)


def rollup_hours(
    since: datetime, until: datetime, *, node_ids: Iterable[int] | None = None, now: datetime | None = None
) -> int:
    """Recompute the hourly rollups of [since, until) from minute rollups; return rows written."""
    buckets: dict[tuple[int, datetime], dict[int, Stats]] = defaultdict(dict)
    horizon = minute_horizon(now or timezone.now())
    for node_id, bucket, packed in _source(NodeMinuteRollup, "bucket", HOUR, horizon, since, until, node_ids):
        gpus = buckets[node_id, bucket]
        for index, samples, *metrics in ROLLUP_PACKING.unpack(packed):
            stats = _stats(gpus, index)
            stats[0] += samples
            for k in range(len(_METRICS)):
                count, low, total, high = metrics[4 * k : 4 * k + 4]
                if count:
                    _add(stats, 1 + 4 * k, count, low, total, high)
    return _write(NodeHourRollup, buckets)


def _source(
    model: type[models.Model],
    column: str,
    step: timedelta,
    horizon: datetime,
    since: datetime,
    until: datetime,
    node_ids: Iterable[int] | None,
) -> Iterator[tuple[int, datetime, bytes]]:
    """(node, bucket, packed GPUs) of the source's rows in [since, until), widened to whole buckets and
    never before the source's horizon (what retention has thinned)."""
    since, until = max(floor_to(since, step), horizon), ceil_to(until, step)
    if since >= until:
        return
    rows = _nodes(model.objects.filter(**{f"{column}__gte": since, f"{column}__lt": until}), node_ids)
    for node_id, moment, packed in rows.values_list("node_id", column, "gpus").order_by().iterator(chunk_size=5_000):
        yield node_id, floor_to(moment, step), packed


def _stats(gpus: dict[int, Stats], index: int) -> Stats:
    """GPU ``index``'s stats in a bucket, nothing counted yet when it is new."""
    stats = gpus.get(index)
    if stats is None:
        stats = gpus[index] = [0, *([0, None, 0, None] * len(_METRICS))]
    return stats


def _add(stats: Stats, at: int, count: int, low: int, total: int, high: int) -> None:
    """Merge (count, min, sum, max) into the metric whose count sits at ``stats[at]``."""
    if stats[at]:
        stats[at + 1] = min(stats[at + 1], low)
        stats[at + 3] = max(stats[at + 3], high)
    else:
        stats[at + 1], stats[at + 3] = low, high
    stats[at] += count
    stats[at + 2] += total


def _nodes(queryset: models.QuerySet, node_ids: Iterable[int] | None) -> models.QuerySet:
    return queryset if node_ids is None else queryset.filter(node_id__in=list(node_ids))


_UTIL, _POWER = metric_field("util_gpu"), metric_field("power_w")
_UTIL_AT, _POWER_AT = 1 + 4 * _METRICS.index("util_gpu"), 1 + 4 * _METRICS.index("power_w")
ROLLUP_COLUMNS = ("node_id", "bucket", "gpus", "_gpus", "_util_gpu_total", "_util_gpu_samples", "_power_w_total")


def rollup_row(node_id: int, bucket: datetime, gpus: dict[int, Stats]) -> tuple[Any, ...]:
    """A rollup table's row for one node and bucket: the GPUs' stats packed, and the fleet's columns."""
    packed = ROLLUP_PACKING.pack([_item(index, stats) for index, stats in sorted(gpus.items())])
    util_n = sum(stats[_UTIL_AT] for stats in gpus.values())
    util_total = sum(stats[_UTIL_AT + 2] for stats in gpus.values())
    powered = [stats for stats in gpus.values() if stats[_POWER_AT]]
    power_total = sum(in_units(_POWER, stats[_POWER_AT + 2] / stats[_POWER_AT]) for stats in powered)
    return (
        node_id,
        bucket,
        packed,
        len(gpus),
        (util_total + util_n * _UTIL.offset) / _UTIL.steps if util_n else None,
        util_n,
        power_total if powered else None,
    )


def stats_of(samples: int, summaries: Mapping[str, tuple[float, float, float]]) -> Stats:
    """A GPU's stats from each metric's (min, mean, max) over ``samples`` samples (in the metric's
    units; a metric not given is absent), as rollups that kept means had them."""
    stats: Stats = [samples]
    for metric in _METRICS:
        if metric not in summaries:
            stats += [0, None, 0, None]
            continue
        field, (low, mean, high) = metric_field(metric), summaries[metric]
        stats += [
            samples,
            _stored(field, low),
            round((mean * field.steps - field.offset) * samples),
            _stored(field, high),
        ]
    return stats


def _stored(field: Field, value: float) -> int:
    return round(value * field.steps) - field.offset


def _item(index: int, stats: Stats) -> tuple[Any, ...]:
    """A GPU's packed item: a metric no sample had is absent (count 0, no min, sum or max)."""
    item: list[Any] = [index, stats[0]]
    for k in range(len(_METRICS)):
        count, low, total, high = stats[1 + 4 * k : 5 + 4 * k]
        item += (count, low, total, high) if count else (0, None, None, None)
    return tuple(item)


def _write(model: type[models.Model], buckets: dict[tuple[int, datetime], dict[int, Stats]]) -> int:
    """Upsert one row per node and bucket; return how many."""
    rows = [rollup_row(node_id, bucket, gpus) for (node_id, bucket), gpus in sorted(buckets.items()) if gpus]
    if not rows:
        return 0
    table = model._meta.db_table
    columns = ", ".join(ROLLUP_COLUMNS)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in ROLLUP_COLUMNS[2:])
    placeholders = ", ".join(["%s"] * len(ROLLUP_COLUMNS))
    upsert = (
        f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) ON CONFLICT (node_id, bucket) DO UPDATE SET {updates}"
    )
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql" and model is NodeMinuteRollup:
            partition_days.make_room(cursor, table, {day_of(row[1]) for row in rows})
        cursor.executemany(upsert, [(row[0], adapt(row[1]), *row[2:]) for row in rows])
    return len(rows)


# The scheduled passes ------------------------------------------------------------------------


@dataclass
class RollupReport:
    minute_rows: int = 0
    hour_rows: int = 0
    windows: list[tuple[str, str, int]] = field(default_factory=list)  # (since, until, nodes)


def roll_up_received(now: datetime) -> RollupReport:
    """The minute pass: recompute the minutes that received rows since the last pass, and the
    hours among them that the hourly pass has already rolled."""
    report = RollupReport()
    with transaction.atomic():
        hour_done = _progress("hour", default=floor_to(now, HOUR))
        minute = _progress("minute", default=_first_received(now))
        upto = min(now - INGEST_SETTLE, minute.position + MAX_RECEIVED_PER_RUN)
        if upto <= minute.position:
            return report
        ranges = (
            NodeGpuSample.objects.filter(received_at__gte=minute.position, received_at__lt=upto)
            .values("node_id")
            .annotate(first=Min("ts"), last=Max("ts"))
            .order_by()
        )
        windows: dict[tuple[datetime, datetime], list[int]] = defaultdict(list)
        for row in ranges:
            windows[floor_to(row["first"], MINUTE), floor_to(row["last"], MINUTE) + MINUTE].append(row["node_id"])
        for (since, until), node_ids in sorted(windows.items()):
            report.minute_rows += rollup_minutes(since, until, node_ids=node_ids, now=now)
            report.windows.append((since.isoformat(), until.isoformat(), len(node_ids)))
            if since < hour_done.position:
                report.hour_rows += rollup_hours(since, min(until, hour_done.position), node_ids=node_ids, now=now)
        minute.position = upto
        minute.save(update_fields=["position"])
    return report


def roll_up_completed_hours(now: datetime) -> RollupReport:
    """The hourly pass: roll every hour that ended at least HOUR_SETTLE ago and is not rolled yet."""
    report = RollupReport()
    with transaction.atomic():
        hour = _progress("hour", default=floor_to(now, HOUR) - HOUR)
        until = min(floor_to(now - HOUR_SETTLE, HOUR), hour.position + MAX_HOURS_PER_RUN * HOUR)
        if until <= hour.position:
            return report
        report.hour_rows = rollup_hours(hour.position, until, now=now)
        report.windows.append((hour.position.isoformat(), until.isoformat(), 0))
        hour.position = until
        hour.save(update_fields=["position"])
    return report


def _first_received(now: datetime) -> datetime:
    """Where the very first minute pass starts: the oldest raw row's arrival, or now when there is none
    (read once in an installation's life, when the progress row is created)."""
    return NodeGpuSample.objects.aggregate(oldest=Min("received_at"))["oldest"] or now


def _progress(name: str, *, default: datetime) -> RollupProgress:
    """The pass's progress row, locked until the transaction ends (one pass at a time). Locks are
    always taken hour before minute, so the two passes cannot deadlock."""
    progress, _ = RollupProgress.objects.select_for_update().get_or_create(name=name, defaults={"position": default})
    return progress
