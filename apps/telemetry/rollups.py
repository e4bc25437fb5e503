"""Rollups (raw → 1 minute → 1 hour) and retention, as plain functions; tasks.py schedules them.

Rolling a window is idempotent: its buckets are deleted and recomputed from the source in one
transaction (``INSERT ... SELECT``, set-based, on either database), so re-running a window gives
the same rows. A window is never recomputed from a source that retention has already thinned (the
start is clamped to the source's horizon), or a re-run would erase rollups.

Late data is expected: an agent that was cut off for an hour replays its backlog. The minute pass
is therefore driven by when rows were *received*, not by their timestamps: every run finds the
nodes and time ranges that received rows since the last run and recomputes exactly those
minutes, then the already-rolled hours they fall in.
"""

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Avg, Case, Count, F, FloatField, Max, Min, Sum, When
from django.db.models.functions import TruncHour, TruncMinute
from django.utils import timezone

from apps.telemetry.models import (
    ROLLUP_METRICS,
    GpuHourRollup,
    GpuMinuteRollup,
    GpuSample,
    PortSample,
    RollupProgress,
)

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


# How each rollup column is computed from its source (raw samples; minute rollups).
_FROM_RAW: dict[str, models.Aggregate] = {"sample_count": Count("*")}
_FROM_MINUTES: dict[str, models.Expression] = {"sample_count": Sum("sample_count")}
for _metric in ROLLUP_METRICS:
    _FROM_RAW |= {f"{_metric}_min": Min(_metric), f"{_metric}_mean": Avg(_metric), f"{_metric}_max": Max(_metric)}
    _FROM_MINUTES |= {
        f"{_metric}_min": Min(f"{_metric}_min"),
        f"{_metric}_mean": Sum(F(f"{_metric}_mean") * F("sample_count"), output_field=FloatField())
        / Sum(Case(When(**{f"{_metric}_mean__isnull": False}, then=F("sample_count")))),
        f"{_metric}_max": Max(f"{_metric}_max"),
    }


def rollup_minutes(
    since: datetime, until: datetime, *, node_ids: Iterable[int] | None = None, now: datetime | None = None
) -> int:
    """Recompute the 1-minute rollups of [since, until), widened to whole minutes; return rows written."""
    source = _Source(GpuSample, "ts", TruncMinute, raw_horizon(now or timezone.now()))
    return _recompute(GpuMinuteRollup, MINUTE, source, _FROM_RAW, since, until, node_ids)


def rollup_hours(
    since: datetime, until: datetime, *, node_ids: Iterable[int] | None = None, now: datetime | None = None
) -> int:
    """Recompute the hourly rollups of [since, until) from minute rollups; return rows written.

    An hour's mean is the minutes' means weighted by their sample counts (minutes where a metric
    was absent do not count for it), so it equals the mean of the raw samples whenever a metric is
    present in all or none of a minute's samples.
    """
    source = _Source(GpuMinuteRollup, "bucket", TruncHour, minute_horizon(now or timezone.now()))
    return _recompute(GpuHourRollup, HOUR, source, _FROM_MINUTES, since, until, node_ids)


@dataclass(frozen=True)
class _Source:
    model: type[models.Model]
    time_column: str
    truncate: type[models.Func]
    horizon: datetime  # the source is complete only from here on (retention thins what is older)


def _recompute(
    target: type[models.Model],
    step: timedelta,
    source: _Source,
    columns: dict[str, models.Expression],
    since: datetime,
    until: datetime,
    node_ids: Iterable[int] | None,
) -> int:
    since, until = max(floor_to(since, step), source.horizon), ceil_to(until, step)
    if since >= until:
        return 0
    window = {f"{source.time_column}__gte": since, f"{source.time_column}__lt": until}
    rows = _nodes(source.model.objects.filter(**window), node_ids)
    select = _grouped(rows, source.truncate(source.time_column), columns)
    with transaction.atomic():
        _nodes(target.objects.filter(bucket__gte=since, bucket__lt=until), node_ids).delete()
        return _insert_select(target, select)


def _nodes(queryset: models.QuerySet, node_ids: Iterable[int] | None) -> models.QuerySet:
    return queryset if node_ids is None else queryset.filter(node_id__in=list(node_ids))


# Aliases of computed columns carry this prefix, so they never shadow the source's own columns
# (a minute rollup's ``sample_count`` is summed into the hour's ``sample_count``).
_COMPUTED = "rolled_"


def _grouped(source: models.QuerySet, bucket: models.Func, aggregates: dict[str, models.Expression]) -> models.QuerySet:
    """One row per (node, bucket, GPU), with the aggregates named by their target columns."""
    return (
        source.annotate(**{f"{_COMPUTED}bucket": bucket})
        .values("node_id", f"{_COMPUTED}bucket", "gpu_index")
        .annotate(**{f"{_COMPUTED}{column}": aggregate for column, aggregate in aggregates.items()})
        .order_by()
    )


def _insert_select(model: type[models.Model], select: models.QuerySet) -> int:
    """``INSERT INTO <model> (<columns>) <select>``: the rows never leave the database."""
    compiler = select.query.get_compiler(using=select.db)
    sql, params = compiler.as_sql()
    columns = [
        alias.removeprefix(_COMPUTED) if alias else expression.target.column for expression, _, alias in compiler.select
    ]
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) {sql}", params)
        return cursor.rowcount


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
            GpuSample.objects.filter(received_at__gte=minute.position, received_at__lt=upto)
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
    """Where the very first minute pass starts: the oldest raw row (ids grow with insertion, so the
    primary key finds it at once), or now when there is none."""
    oldest = GpuSample.objects.order_by("id").values_list("received_at", flat=True).first()
    return oldest or now


def _progress(name: str, *, default: datetime) -> RollupProgress:
    """The pass's progress row, locked until the transaction ends (one pass at a time). Locks are
    always taken hour before minute, so the two passes cannot deadlock."""
    progress, _ = RollupProgress.objects.select_for_update().get_or_create(name=name, defaults={"position": default})
    return progress


# Retention -----------------------------------------------------------------------------------

RETENTION_BATCH_ROWS = 20_000


def apply_retention(
    now: datetime, *, batch_rows: int = RETENTION_BATCH_ROWS, time_budget_s: float | None = None
) -> dict[str, int]:
    """Delete raw samples older than TELEMETRY_RAW_RETENTION_HOURS and minute rollups older than
    TELEMETRY_MINUTE_RETENTION_DAYS (hourly rollups are kept), in batches of short transactions.
    Stops early when the time budget is spent; the next run carries on. Returns rows deleted."""
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    raw_cutoff = now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS)
    minute_cutoff = now - timedelta(days=settings.TELEMETRY_MINUTE_RETENTION_DAYS)
    plan = ((GpuSample, "ts", raw_cutoff), (PortSample, "ts", raw_cutoff), (GpuMinuteRollup, "bucket", minute_cutoff))
    return {
        model._meta.model_name: _delete_older(model, column, cutoff, batch_rows, deadline)
        for model, column, cutoff in plan
    }


def _delete_older(
    model: type[models.Model], column: str, cutoff: datetime, batch_rows: int, deadline: float | None
) -> int:
    # Batches by physical row address: no id index needed, and on PostgreSQL the inner SELECT
    # finds old rows through the BRIN index on the time column.
    table = model._meta.db_table
    if connection.vendor == "postgresql":
        sql = f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} WHERE {column} < %s LIMIT %s))"
    else:
        sql = f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE {column} < %s LIMIT %s)"
    cutoff_param = connection.ops.adapt_datetimefield_value(cutoff)
    deleted = 0
    while deadline is None or time.monotonic() < deadline:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [cutoff_param, batch_rows])
            batch = cursor.rowcount
        deleted += batch
        if batch < batch_rows:
            break
    return deleted
