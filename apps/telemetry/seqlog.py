"""Telemetry cursors on PostgreSQL as a log: one row a batch instead of one updated row a node.

Advancing a batch's 250 cursor rows cost the writer about as long as copying its samples
(``benchmarks/copy_ratio.py``: ~2.2 ms of a 5.7 ms batch; PostgreSQL pays ~9 µs an updated row, WAL
and all). So a batch appends one row to ``telemetry_seqlog`` holding its nodes and their highest seqs
(two bigint arrays), and a node's stored telemetry cursor is its ``TelemetryCursor`` row joined
(``GREATEST``) with the log's rows that name it. Every ``FOLD_ROWS`` rows the writer that notices
folds the log into ``TelemetryCursor`` (one upsert of each node that advanced) and deletes what it
folded, so the log stays a few dozen rows and readers scan little.

Writers take turns under one transaction-scoped advisory lock (``WRITERS_LOCK``), taken first thing,
so a writer's view of the cursors cannot be overtaken before it commits: that is what makes "a seq
at or below the stored cursor is already stored" exact across server processes, as the per-node row
locks made it before. Each connection remembers the cursors it has learnt (``_Memory``) and reads
only the log rows appended since its last batch; its own row it reads back with the next batch, so
nothing remembered ever comes from a transaction that might not commit.

What makes a connection forget: a fold of rows it never read (their seqs now live only in the table)
and a reset, which may lower a cursor (``cursors.reset_seqs``: it folds everything, sets the row,
and counts itself in ``telemetry_seqlog_state``). Both are in the one-row state table read with the
log. Readers outside the writers (Welcome, the reset's answer, benchmarks) read row and log in one
statement, one snapshot: ``stored_seqs``.

SQLite, the demo's database, has one writer at a time and keeps the per-node claim (cursors.py).
"""

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, TypeVar

import psycopg
from django.db.backends.utils import CursorWrapper

from apps.telemetry.models import TelemetryCursor, TelemetrySeqLog, TelemetrySeqLogState

log = logging.getLogger(__name__)
T = TypeVar("T")
FOLD_ROWS: Final = 32  # log rows a writer lets pile up before it folds them into the table
LOG_TABLE: Final = TelemetrySeqLog._meta.db_table
STATE_TABLE: Final = TelemetrySeqLogState._meta.db_table
WRITERS_LOCK: Final = "telemetry_seqlog:writers"
_CURSORS = TelemetryCursor._meta.db_table

# The state row is made by the first writer to miss it (after a migration, or a flush of the database),
# its count of resets starting at random so that it never matches what a writer remembers; then the
# writers' lock. What a writer reads follows in a statement of its own: in READ COMMITTED each
# statement reads its own snapshot, and one taken before the lock was granted would miss the rows of
# the writer it waited for.
_LOCK = (
    f"WITH made AS (INSERT INTO {STATE_TABLE} (id, folded_through, resets) "
    "VALUES (1, 0, (random() * 9e18)::bigint) ON CONFLICT (id) DO NOTHING) "
    "SELECT pg_advisory_xact_lock(hashtext(%b))"
)
# The batch's row goes in with the reading, which (a WITH's sibling) does not see it, before the
# batch's cursors are known: readers take the greatest of a node's row and log rows, so a seq below
# what is stored changes nothing. The arrays travel as text ("{1,2,3}"): psycopg's binary list
# dumper walks a list in Python (0.4 ms for a 250-node batch's two), where joining their digits
# takes 0.03 and the server parses them in C. Kept simple enough for the planner to see it is cheap:
# a join estimated on a fresh log once passed jit_above_cost and spent 40 ms compiling every batch.
_APPEND_AND_READ = (
    f"WITH appended AS (INSERT INTO {LOG_TABLE} (node_ids, seqs) VALUES (%s::bigint[], %s::bigint[]) RETURNING id) "
    "SELECT s.folded_through, s.resets, (SELECT id FROM appended), l.id, l.node_ids, l.seqs "
    f"FROM {STATE_TABLE} s LEFT JOIN LATERAL (SELECT id, node_ids, seqs FROM {LOG_TABLE} WHERE id > %b) l ON true "
    "WHERE s.id = 1 ORDER BY l.id"
)
_READ_ROWS = f"SELECT id, node_ids, seqs FROM {LOG_TABLE} WHERE id > %b AND id < %b ORDER BY id"
_TABLE_SEQS = f"SELECT node_id, telemetry_seq FROM {_CURSORS} WHERE node_id = ANY(%b::bigint[])"
_FOLD = (
    f"WITH folded AS (DELETE FROM {LOG_TABLE} WHERE id <= %b RETURNING node_ids, seqs) "
    f"INSERT INTO {_CURSORS} AS c (node_id, telemetry_seq, events_seq, telemetry_seq_before, updated_at) "
    "SELECT a.node_id, max(a.seq), 0, 0, %b FROM folded, unnest(folded.node_ids, folded.seqs) AS a (node_id, seq) "
    "GROUP BY a.node_id ORDER BY a.node_id "
    "ON CONFLICT (node_id) DO UPDATE SET telemetry_seq = GREATEST(c.telemetry_seq, excluded.telemetry_seq), "
    "updated_at = CASE WHEN excluded.telemetry_seq > c.telemetry_seq THEN excluded.updated_at ELSE c.updated_at END"
)
_FOLDED_THROUGH = f"UPDATE {STATE_TABLE} SET folded_through = %b"
# Each node's highest seq in the log (``{where}``: which nodes, which rows).
_LOG_MAXIMA = (
    f"SELECT a.node_id, max(a.seq) AS seq FROM {LOG_TABLE} l, unnest(l.node_ids, l.seqs) AS a (node_id, seq) "
    "{where} GROUP BY a.node_id"
)


def _stored_of_nodes(log_rows: str = "") -> str:
    """Each listed node's stored telemetry and events seq, from its row and the log's rows (those
    ``log_rows`` admits), of the nodes that have either."""
    maxima = _LOG_MAXIMA.format(where=f"WHERE a.node_id = ANY(%s::bigint[]){log_rows}")
    return (
        "SELECT n.node_id, GREATEST(c.telemetry_seq, l.seq), coalesce(c.events_seq, 0) "
        f"FROM unnest(%s::bigint[]) AS n (node_id) LEFT JOIN {_CURSORS} c ON c.node_id = n.node_id "
        f"LEFT JOIN ({maxima}) l ON l.node_id = n.node_id WHERE c.node_id IS NOT NULL OR l.node_id IS NOT NULL"
    )


_STORED = _stored_of_nodes()
# Every log row but this transaction's own (the highest id): what was stored before this batch.
_STORED_BEFORE_NOW = _stored_of_nodes(f" AND l.id < (SELECT max(id) FROM {LOG_TABLE})")
_STORED_ALL = (
    "SELECT coalesce(c.node_id, l.node_id), GREATEST(c.telemetry_seq, l.seq), coalesce(c.events_seq, 0) "
    f"FROM {_CURSORS} c FULL JOIN ({_LOG_MAXIMA.format(where='')}) l ON l.node_id = c.node_id"
)


@dataclass(slots=True)
class _Memory:
    """What one connection knows of the cursors: ``exact`` holds a node's stored cursor as of log row
    ``read_through``; ``from_log`` the highest seq of each node in the log rows read since the last
    time this connection forgot (a node not in ``exact`` is read from the table and joined with it)."""

    read_through: int = 0
    folded_through: int = -1
    resets: int = -1
    exact: dict[int, int] = field(default_factory=dict)
    from_log: dict[int, int] = field(default_factory=dict)

    def merge(self, node_ids: Sequence[int], seqs: Sequence[int]) -> None:
        exact, from_log = self.exact, self.from_log
        for node_id, seq in zip(node_ids, seqs, strict=True):
            if seq > from_log.get(node_id, 0):
                from_log[node_id] = seq
            if node_id in exact and seq > exact[node_id]:
                exact[node_id] = seq

    def learn(self, node_ids: Sequence[int], in_table: Mapping[int, int]) -> None:
        """Nodes read from the table under the lock: each cursor is the table's joined with the log's."""
        for node_id in node_ids:
            self.exact[node_id] = max(in_table.get(node_id, 0), self.from_log.get(node_id, 0))

    def forget(self, *, folded_through: int, resets: int) -> None:
        self.exact.clear()
        self.from_log.clear()
        self.read_through, self.resets = folded_through, resets


class _Memories(threading.local):
    """One _Memory per thread and database alias, as Django's connections are."""

    def __init__(self) -> None:
        self.by_alias: dict[str, _Memory] = {}


_memories = _Memories()


def _memory_of(alias: str) -> _Memory:
    return _memories.by_alias.setdefault(alias, _Memory())


def claim(
    cursor: CursorWrapper,
    highest: Mapping[int, int],
    lowest: Mapping[int, int],
    now: datetime,
    meanwhile: Callable[[], T],
) -> tuple[dict[int, int], T]:
    """Under the writers' lock, each node's stored cursor (0 for a node never stored), with what
    ``meanwhile()`` gave; and a log row appended that advances each node to ``highest[node]`` (a
    stored cursor above it stays: readers take the greatest). The lock, the log's news and the new
    row go in pipeline mode with the transaction's BEGIN, and ``meanwhile`` runs while the database
    answers."""
    memory = _memory_of(cursor.db.alias)
    connection = cursor.cursor.connection
    node_order = sorted(highest)
    with cursor.db.wrap_database_errors, psycopg.Cursor(connection) as binary:
        with connection.pipeline():
            binary.execute(_LOCK, [WRITERS_LOCK], prepare=True)
            advanced = [_array(node_order), _array(highest[n] for n in node_order)]
            binary.execute(_APPEND_AND_READ, [*advanced, memory.read_through], prepare=True)
            done = meanwhile()
        news = binary.fetchall()
        folded_through, resets, appended = news[0][:3]
        rows = [row[3:] for row in news if row[3] is not None]
        if resets != memory.resets or not memory.folded_through <= folded_through <= memory.read_through:
            # A reset, a fold of rows this connection never read, or a database that went back (a
            # restored backup, a test's rollback): what it remembers may be wrong. The table holds
            # every folded row; the rows after them are read again if this connection had passed them.
            if memory.read_through > folded_through:  # up to this batch's own row, which is not news
                binary.execute(_READ_ROWS, [folded_through, appended], prepare=True)
                rows = binary.fetchall()
            memory.forget(folded_through=folded_through, resets=resets)
        memory.folded_through = folded_through
        for row_id, node_ids, seqs in rows:
            memory.merge(node_ids, seqs)
            memory.read_through = row_id
        missing = [node_id for node_id in highest if node_id not in memory.exact]
        if missing:
            binary.execute(_TABLE_SEQS, [missing], prepare=True)
            memory.learn(missing, dict(binary.fetchall()))
        before = {node_id: memory.exact[node_id] for node_id in highest}
        if replays := [node_id for node_id, seq in lowest.items() if seq <= before[node_id]]:
            before.update(_confirmed(binary, memory, replays, before))
        if appended - folded_through > FOLD_ROWS:
            # Through the rows this connection has read, not its own new one: it reads that back with
            # its next batch like any other, and so goes on remembering what it knows.
            binary.execute(_FOLD, [memory.read_through, now], prepare=True)
            binary.execute(_FOLDED_THROUGH, [memory.read_through], prepare=True)
    return before, done


def _confirmed(binary: psycopg.Cursor, memory: _Memory, node_ids: list[int], before: dict[int, int]) -> dict[int, int]:
    """The stored cursors of nodes whose messages memory says were stored before, read from the table
    and the whole log: a message is dropped on the database's word, never on a memory's alone. A
    replay is rare (an agent reconnecting), so this costs nothing in the steady state; a memory found
    wrong is forgotten whole, and said so."""
    binary.execute(_STORED_BEFORE_NOW, [node_ids, node_ids], prepare=True)
    stored = {node_id: 0 for node_id in node_ids} | {node_id: seq for node_id, seq, _ in binary.fetchall()}
    if wrong := {node_id: (before[node_id], seq) for node_id, seq in stored.items() if seq != before[node_id]}:
        log.warning("telemetry cursors remembered wrongly, forgotten (node: remembered, stored): %s", wrong)
        # A count of resets no state holds: the next batch reads the whole log and the table afresh.
        memory.forget(folded_through=memory.folded_through, resets=-1)
    return stored


def _array(numbers: Iterable[int]) -> str:
    return "{" + ",".join(map(str, numbers)) + "}"


def fold_all(cursor: CursorWrapper, now: datetime) -> None:
    """Take the writers' lock and fold the whole log into the table (a reset does, first)."""
    with cursor.db.wrap_database_errors, psycopg.Cursor(cursor.cursor.connection) as binary:
        binary.execute(_LOCK, [WRITERS_LOCK])
        binary.execute(f"SELECT coalesce(max(id), 0) FROM {LOG_TABLE}")
        (through,) = binary.fetchone()
        binary.execute(_FOLD, [through, now])
        binary.execute(f"UPDATE {STATE_TABLE} SET folded_through = GREATEST(folded_through, %b)", [through])


def count_reset(cursor: CursorWrapper) -> None:
    """A cursor was set from outside the writers (a reset): every writer forgets what it knows."""
    cursor.execute(f"UPDATE {STATE_TABLE} SET resets = resets + 1")


def stored_seqs(cursor: CursorWrapper, node_ids: Sequence[int] | None) -> dict[int, tuple[int, int]]:
    """Each node's stored telemetry and events seq, of those that have any (all nodes for None)."""
    if node_ids is None:
        cursor.execute(_STORED_ALL)
    else:
        ids = list(node_ids)
        cursor.execute(_STORED, [ids, ids])
    return {node_id: (telemetry_seq, events_seq) for node_id, telemetry_seq, events_seq in cursor.fetchall()}
