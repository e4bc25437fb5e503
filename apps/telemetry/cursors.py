"""Each node's sequence cursors (TelemetryCursor), read and advanced inside the writers' transactions.

The telemetry writer claims a batch's seqs in one statement (``claim_telemetry_seqs``), packing the
batch while the database works on it: each node's
cursor row is created if missing, locked, advanced to the batch's highest seq and its value before
returned, an ``INSERT ... ON CONFLICT DO UPDATE`` whose rows arrive in node order, so every writer
takes the row locks in one order (no deadlocks). What was stored before comes back in
``telemetry_seq_before``, set from the row as locked: a ``RETURNING`` gives the new values only, and
reading the old ones from a subquery would read the statement's snapshot, which a concurrent writer
may have overtaken. The events writer, one node and one message at a time, locks and advances its
cursor with ``lock_cursors`` and ``advance_cursors``.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from django.db.backends.utils import CursorWrapper

from apps.telemetry.models import TelemetryCursor

T = TypeVar("T")
_TABLE = TelemetryCursor._meta.db_table
_STREAMS = frozenset({"telemetry_seq", "events_seq"})
_CHUNK = 500  # rows per VALUES list on SQLite: well under its parameter limit

# On PostgreSQL the node ids and seqs travel as binary arrays to a statement prepared once per
# connection: a list of a few hundred placeholders was parsed again for every batch (~12% of the
# ingesting process's CPU in a profile at 800 agent messages a second), and arrays written out as
# text cost the writer and the server a parse of their own (0.15 ms of 1.2 a batch of 250 nodes).
_CLAIM_SET = (
    "telemetry_seq_before = c.telemetry_seq, telemetry_seq = {greatest}(c.telemetry_seq, excluded.telemetry_seq), "
    "updated_at = CASE WHEN excluded.telemetry_seq > c.telemetry_seq THEN excluded.updated_at ELSE c.updated_at END"
)
_CLAIM_POSTGRESQL = (
    f"INSERT INTO {_TABLE} AS c (node_id, updated_at, telemetry_seq, events_seq, telemetry_seq_before) "
    "SELECT v.node_id, %b, v.seq, 0, 0 FROM unnest(%b::bigint[], %b::bigint[]) AS v (node_id, seq) ORDER BY v.node_id "
    f"ON CONFLICT (node_id) DO UPDATE SET {_CLAIM_SET.format(greatest='GREATEST')} "
    "RETURNING c.node_id, c.telemetry_seq_before"
)


def claim_telemetry_seqs(
    cursor: CursorWrapper, highest: Mapping[int, int], now: datetime, meanwhile: Callable[[], T]
) -> tuple[dict[int, int], T]:
    """Advance each node's telemetry cursor to ``highest[node]`` (never back) and return what it held
    before (0 for a node met for the first time), with what ``meanwhile()`` gave; the rows stay locked
    until the transaction ends. One statement on PostgreSQL, sent in pipeline mode (with the
    transaction's BEGIN) so that ``meanwhile`` runs while the database claims: the writer packs its
    batch then, about as long as the claim takes, instead of after it. On SQLite, where the
    transaction holds the database's write lock, one statement per few hundred nodes, then
    ``meanwhile``."""
    if not highest:
        return {}, meanwhile()
    node_ids = sorted(highest)
    now = cursor.db.ops.adapt_datetimefield_value(now)
    if cursor.db.vendor == "postgresql":
        connection = cursor.cursor.connection
        with cursor.db.wrap_database_errors, psycopg.Cursor(connection) as binary:
            with connection.pipeline():
                binary.execute(_CLAIM_POSTGRESQL, [now, node_ids, [highest[n] for n in node_ids]], prepare=True)
                done = meanwhile()
            return dict(binary.fetchall()), done
    before: dict[int, int] = {}
    for values, params in values_lists([(n, now, highest[n]) for n in node_ids], row="(%s, %s, %s, 0, 0)"):
        cursor.execute(
            f"INSERT INTO {_TABLE} AS c (node_id, updated_at, telemetry_seq, events_seq, telemetry_seq_before) "
            f"VALUES {values} ON CONFLICT (node_id) DO UPDATE SET {_CLAIM_SET.format(greatest='max')} "
            "RETURNING node_id, telemetry_seq_before",
            params,
        )
        before.update(cursor.fetchall())
    return before, meanwhile()


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
