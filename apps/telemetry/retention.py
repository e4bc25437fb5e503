"""Retention: raw samples older than ``TELEMETRY_RAW_RETENTION_HOURS`` and minute rollups older than
``TELEMETRY_MINUTE_RETENTION_DAYS`` go; hourly rollups stay. tasks.py schedules it, with the creation
of the days ahead.

On PostgreSQL whole daily partitions are dropped (partitions.py) once all of their day is past
retention, so a raw sample lives between 48 and 72 hours at the defaults, and nothing is deleted row
by row: no DELETE of samples, no dead rows for vacuum, no other table touched. On SQLite (the demo)
rows are deleted by time in batches of short transactions.
"""

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, models, transaction

from apps.telemetry.models import NodeGpuSample, NodeMinuteRollup, NodePortSample
from apps.telemetry.partitions import AHEAD_DAYS, DAY, day_of, drop_before, ensure_days

RETENTION_BATCH_ROWS = 20_000


@dataclass(frozen=True)
class Kept:
    """A table kept for a while: by which time column, and how long."""

    model: type[models.Model]
    column: str
    retention: timedelta

    @property
    def table(self) -> str:
        return self.model._meta.db_table


def kept() -> tuple[Kept, ...]:
    """The tables retention thins, with the settings in force (the daily-partitioned ones)."""
    raw = timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS)
    minutes = timedelta(days=settings.TELEMETRY_MINUTE_RETENTION_DAYS)
    return (Kept(NodeGpuSample, "ts", raw), Kept(NodePortSample, "ts", raw), Kept(NodeMinuteRollup, "bucket", minutes))


@dataclass
class RetentionReport:
    dropped: list[str] = field(default_factory=list)  # partitions (PostgreSQL)
    deleted: dict[str, int] = field(default_factory=dict)  # rows by table (SQLite)


def apply_retention(
    now: datetime, *, batch_rows: int = RETENTION_BATCH_ROWS, time_budget_s: float | None = None
) -> RetentionReport:
    """Drop (PostgreSQL) or delete (SQLite) what is past retention. On SQLite, stops early when the time
    budget is spent; the next run carries on."""
    report = RetentionReport()
    if connection.vendor == "postgresql":
        for table in kept():
            with transaction.atomic(), connection.cursor() as cursor:
                report.dropped += drop_before(cursor, table.table, now - table.retention)
        return report
    deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
    for table in kept():
        report.deleted[table.table] = _delete_older(table, now - table.retention, batch_rows, deadline)
    return report


def create_partitions_ahead(now: datetime) -> list[str]:
    """Make sure every partitioned table has today's partition and the next ``AHEAD_DAYS``' (PostgreSQL;
    nothing on SQLite); return the partitions created."""
    if connection.vendor != "postgresql":
        return []
    days = [day_of(now) + n * DAY for n in range(AHEAD_DAYS + 1)]
    created = []
    for table in kept():
        with transaction.atomic(), connection.cursor() as cursor:
            created += ensure_days(cursor, table.table, days)
    return created


def _delete_older(table: Kept, cutoff: datetime, batch_rows: int, deadline: float | None) -> int:
    sql = (
        f"DELETE FROM {table.table} WHERE rowid IN (SELECT rowid FROM {table.table} WHERE {table.column} < %s LIMIT %s)"
    )
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
