"""Daily partitions of the big telemetry tables on PostgreSQL: raw GPU and port samples (by ``ts``)
and minute rollups (by ``bucket``).

- A scheduled task creates each table's partitions for today and the next ``AHEAD_DAYS`` days
  (tasks.create_partitions), so the writer never waits on DDL.
- Retention drops a partition once all of it is past the table's retention (``drop_expired``): one
  short DDL statement whatever the rows, no DELETE, no vacuum debt, and nothing else touched.
- A writer that meets a day with no partition (a node replaying an old backlog, a scheduler that
  has not run) creates it in its own transaction (``make_room``): ingest never fails for want of one.

A partition covers [00:00, 24:00) UTC of its day and is named ``<table>_<YYYYMMDD>``. It is created
as a plain table like its parent and then attached, which takes a SHARE UPDATE EXCLUSIVE lock on the
parent (creating it with PARTITION OF would take ACCESS EXCLUSIVE and stall every reader); creators
queue on an advisory lock so two processes never race to attach the same day. Dropping takes a
brief ACCESS EXCLUSIVE lock on the parent, bounded by ``lock_timeout``: a busy moment makes the next
run drop it instead.

SQLite (the demo) has no partitions: its tables are plain and retention deletes by time
(rollups.apply_retention).
"""

import re
import threading
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from typing import Final

from django.db import transaction
from django.db.backends.utils import CursorWrapper

from apps.core.process import ProcessPart

DAY: Final = timedelta(days=1)
AHEAD_DAYS: Final = 2
DROP_LOCK_TIMEOUT: Final = "5s"
_SUFFIX = re.compile(r"_(\d{8})$")


def day_of(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def start_of(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def partition_name(table: str, day: date) -> str:
    return f"{table}_{day:%Y%m%d}"


def existing_days(cursor: CursorWrapper, table: str) -> set[date]:
    """The days ``table`` has a partition for."""
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
        [table],
    )
    days = set()
    for (name,) in cursor.fetchall():
        found = _SUFFIX.search(name)
        if found:
            days.add(datetime.strptime(found.group(1), "%Y%m%d").date())
    return days


def ensure_days(cursor: CursorWrapper, table: str, days: Iterable[date]) -> list[str]:
    """Create ``table``'s partitions for those of ``days`` it lacks; return the partitions created.
    Runs in the caller's transaction (the partitions exist once it commits)."""
    wanted = set(days)
    if not wanted or wanted <= existing_days(cursor, table):
        return []
    cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"partitions:{table}"])
    created = []
    for day in sorted(wanted - existing_days(cursor, table)):  # again: another creator may have been first
        name = partition_name(table, day)
        start, end = start_of(day), start_of(day + DAY)
        cursor.execute(
            f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING STORAGE INCLUDING COMPRESSION)"
        )
        cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)", [start, end])
        created.append(name)
    return created


def drop_before(cursor: CursorWrapper, table: str, cutoff: datetime) -> list[str]:
    """Drop ``table``'s partitions that end at or before ``cutoff``; return their names. Nothing else
    is read or written: a partition is dropped whole or not at all."""
    dropped = []
    cursor.execute(f"SET LOCAL lock_timeout = '{DROP_LOCK_TIMEOUT}'")
    for day in sorted(existing_days(cursor, table)):
        if start_of(day + DAY) > cutoff:
            break
        name = partition_name(table, day)
        cursor.execute(f"DROP TABLE {name}")
        dropped.append(name)
    return dropped


class PartitionDays(ProcessPart):
    """The days this process knows to have partitions, by table, so the writer checks the catalog only
    for a day it has not met. Learnt only from committed transactions; forgotten when a write fails
    (retention may have dropped a day since) and when the process shuts down."""

    def __init__(self) -> None:
        self._known: dict[str, set[date]] = {}
        self._lock = threading.Lock()

    def make_room(self, cursor: CursorWrapper, table: str, days: Iterable[date]) -> None:
        """Make sure ``table`` has a partition for each of ``days`` once the caller's transaction commits."""
        days = set(days)
        with self._lock:
            missing = days - self._known.get(table, set())
        if not missing:
            return
        ensure_days(cursor, table, missing)
        transaction.on_commit(lambda: self._learn(table, missing), using=cursor.db.alias)

    def forget(self) -> None:
        with self._lock:
            self._known.clear()

    async def shutdown(self) -> None:
        self.forget()

    def _learn(self, table: str, days: set[date]) -> None:
        with self._lock:
            self._known.setdefault(table, set()).update(days)


partition_days = PartitionDays()  # the process's; added to apps.core.process in apps.py
