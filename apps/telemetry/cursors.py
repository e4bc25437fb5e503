"""Each node's sequence cursors, read and advanced inside the writers' transactions.

On PostgreSQL the telemetry writer claims a batch's seqs with one log row (seqlog.py), packing the
batch while the database takes the writers' lock; a node's stored telemetry cursor is its
TelemetryCursor row joined with that log (``stored_seqs`` reads both). On SQLite, the demo's
database, where a transaction holds the database's write lock, each node's cursor row is created if
missing and advanced in ``INSERT ... ON CONFLICT DO UPDATE`` statements that return what it held
before in ``telemetry_seq_before``, set from the row as locked (a ``RETURNING`` gives the new values
only). The events writer, one node and one message at a time, locks and advances its cursor with
``lock_cursors`` and ``advance_cursors``; ``reset_seqs`` sets both streams' from outside.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from apps.telemetry import seqlog
from apps.telemetry.models import TelemetryCursor

T = TypeVar("T")
_TABLE = TelemetryCursor._meta.db_table
_STREAMS = frozenset({"telemetry_seq", "events_seq"})
_CHUNK = 500  # rows per VALUES list on SQLite: well under its parameter limit

_CLAIM_SET = (
    "telemetry_seq_before = c.telemetry_seq, telemetry_seq = max(c.telemetry_seq, excluded.telemetry_seq), "
    "updated_at = CASE WHEN excluded.telemetry_seq > c.telemetry_seq THEN excluded.updated_at ELSE c.updated_at END"
)


def claim_telemetry_seqs(
    cursor: CursorWrapper,
    highest: Mapping[int, int],
    lowest: Mapping[int, int],
    now: datetime,
    meanwhile: Callable[[], T],
) -> tuple[dict[int, int], T]:
    """Advance each node's telemetry cursor to ``highest[node]`` (never back) and return what it held
    before (0 for a node met for the first time), with what ``meanwhile()`` gave; no other writer
    claims the nodes until the transaction ends. On PostgreSQL one log row (seqlog.py), ``meanwhile``
    running while the database takes the lock; on SQLite one statement per few hundred nodes, then
    ``meanwhile``."""
    if not highest:
        return {}, meanwhile()
    if cursor.db.vendor == "postgresql":
        return seqlog.claim(cursor, highest, lowest, now, meanwhile)
    db_now = cursor.db.ops.adapt_datetimefield_value(now)
    before: dict[int, int] = {}
    for values, params in values_lists([(n, db_now, highest[n]) for n in sorted(highest)], row="(%s, %s, %s, 0, 0)"):
        cursor.execute(
            f"INSERT INTO {_TABLE} AS c (node_id, updated_at, telemetry_seq, events_seq, telemetry_seq_before) "
            f"VALUES {values} ON CONFLICT (node_id) DO UPDATE SET {_CLAIM_SET} "
            "RETURNING node_id, telemetry_seq_before",
            params,
        )
        before.update(cursor.fetchall())
    return before, meanwhile()


def stored_seqs(node_ids: Sequence[int] | None = None) -> dict[int, tuple[int, int]]:
    """The highest telemetry and events seq stored for each of ``node_ids`` that has any (every such
    node for None), as one snapshot of the database."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            return seqlog.stored_seqs(cursor, node_ids)
        rows = TelemetryCursor.objects.all()
        if node_ids is not None:
            rows = rows.filter(node_id__in=node_ids)
        return {
            node_id: (telemetry, events)
            for node_id, telemetry, events in rows.values_list("node_id", "telemetry_seq", "events_seq")
        }


def reset_seqs(node_id: int, telemetry_seq: int, events_seq: int, now: datetime) -> tuple[int, int]:
    """Set the node's stored seqs (a new epoch: what its agent sends next is new from there on) and
    return what they were. On PostgreSQL the log is folded into the rows first, under the writers'
    lock, and the reset counted, so that every writer forgets what it remembers of the cursors."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            seqlog.fold_all(cursor, now)
        stored = TelemetryCursor.objects.select_for_update().filter(node_id=node_id).first()
        before = (stored.telemetry_seq, stored.events_seq) if stored else (0, 0)
        TelemetryCursor.objects.update_or_create(
            node_id=node_id, defaults={"telemetry_seq": telemetry_seq, "events_seq": events_seq, "updated_at": now}
        )
        if connection.vendor == "postgresql":
            seqlog.count_reset(cursor)
    return before


def lock_cursors(cursor: CursorWrapper, node_ids: Sequence[int], stream: str, now: datetime) -> dict[int, int]:
    """Each node's stored seq for ``stream``, with its cursor row locked until the transaction ends.

    A node seen for the first time gets a row at 0 (``ON CONFLICT DO NOTHING``: two processes may
    race to create it) before it is locked. On SQLite the transaction itself holds the write lock.
    """
    assert stream in _STREAMS
    found = _select_cursors(cursor, node_ids, stream)
    missing = [n for n in node_ids if n not in found]
    if missing:
        now = cursor.db.ops.adapt_datetimefield_value(now)
        for values, params in values_lists([(node_id, now) for node_id in missing], row="(%s, %s, 0, 0)"):
            cursor.execute(
                f"INSERT INTO {_TABLE} (node_id, updated_at, telemetry_seq, events_seq) VALUES {values} "
                "ON CONFLICT (node_id) DO NOTHING",
                params,
            )
        found.update(_select_cursors(cursor, missing, stream))
    return found


def _select_cursors(cursor: CursorWrapper, node_ids: Sequence[int], stream: str) -> dict[int, int]:
    if cursor.db.vendor == "postgresql":
        cursor.execute(
            f"SELECT node_id, {stream} FROM {_TABLE} WHERE node_id = ANY(%s) ORDER BY node_id FOR UPDATE",
            [list(node_ids)],
        )
        return dict(cursor.fetchall())
    found: dict[int, int] = {}
    for start in range(0, len(node_ids), _CHUNK):
        chunk = node_ids[start : start + _CHUNK]
        placeholders = ", ".join(["%s"] * len(chunk))
        cursor.execute(
            f"SELECT node_id, {stream} FROM {_TABLE} WHERE node_id IN ({placeholders}) ORDER BY node_id", chunk
        )
        found.update(cursor.fetchall())
    return found


def advance_cursors(cursor: CursorWrapper, seqs: dict[int, int], stream: str, now: datetime) -> None:
    """Set each node's stored seq: one statement on PostgreSQL, one per few hundred nodes on SQLite."""
    assert stream in _STREAMS
    if not seqs:
        return
    now = cursor.db.ops.adapt_datetimefield_value(now)
    if cursor.db.vendor == "postgresql":
        cursor.execute(
            f"UPDATE {_TABLE} SET {stream} = v.seq, updated_at = %s "
            f"FROM unnest(%s::bigint[], %s::bigint[]) AS v (node_id, seq) WHERE {_TABLE}.node_id = v.node_id",
            [now, list(seqs), list(seqs.values())],
        )
        return
    for values, params in values_lists(list(seqs.items())):
        cursor.execute(
            f"WITH v (node_id, seq) AS (VALUES {values}) UPDATE {_TABLE} "
            f"SET {stream} = v.seq, updated_at = %s FROM v WHERE {_TABLE}.node_id = v.node_id",
            [*params, now],
        )


def values_lists(rows: list[tuple[Any, ...]], row: str = "(%s, %s)") -> Iterable[tuple[str, list[Any]]]:
    """``(%s, %s), (%s, %s), ...`` and its flattened parameters, a few hundred rows at a time."""
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start : start + _CHUNK]
        yield ", ".join([row] * len(chunk)), [value for values in chunk for value in values]
