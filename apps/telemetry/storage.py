"""The bulk writer: many nodes' telemetry messages, their cursors and newest samples, one transaction.

Each sample becomes one row of its node's GPUs and one of its ports, packed (models/samples.py), so
1,000 nodes' second is 2,000 rows, not 16,000. On PostgreSQL they go in with binary ``COPY``
(psycopg 3 ``write_row``), the fastest path the server offers (DESIGN.md: ~460,000 rows/s against
~109,000 for ``executemany``), into the day's partition, which the writer creates if a scheduled task
has not (partitions.py); on SQLite, the demo's database, with ``executemany``. Never a row at a time.

Dedup is by sequence number: each node's cursor row is locked and read inside the transaction, a
message whose seq is at or below it is dropped, and the cursor is advanced with the rows. Reading
the cursor under a row lock every batch (one indexed query) rather than trusting a copy held in
memory is what keeps two server processes from both storing a node's replay after its agent
reconnects to the other one.
"""

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import msgspec
from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Model
from django.utils import timezone

from agents.protocol import Telemetry
from apps.telemetry.models import (
    GPU_METRIC_FIELDS,
    GPU_PACKING,
    PORT_PACKING,
    PORT_SAMPLE_FIELDS,
    LatestGpuSample,
    LatestPortSample,
    NodeGpuSample,
    NodePortSample,
    TelemetryCursor,
)
from apps.telemetry.models.samples import pack
from apps.telemetry.partitions import day_of, partition_days

log = logging.getLogger(__name__)

# Column order of a copied raw row; of a newest-sample row: (ts, received_at, node_id) + the protocol
# struct's fields (``msgspec.structs.astuple``).
GPU_SAMPLE_COLUMNS: tuple[str, ...] = ("node_id", "ts", "received_at", "gpus")
PORT_SAMPLE_COLUMNS: tuple[str, ...] = ("node_id", "ts", "received_at", "ports")
GPU_COLUMNS: tuple[str, ...] = ("ts", "received_at", "node_id", "gpu_index", *GPU_METRIC_FIELDS)
PORT_COLUMNS: tuple[str, ...] = ("ts", "received_at", "node_id", *PORT_SAMPLE_FIELDS)
_CHUNK = 500  # ids per IN (...) list: well under SQLite's and PostgreSQL's parameter limits

# PostgreSQL type of each Django field kind, for binary COPY (which sends no type inference).
_PG_BINARY_TYPES = {
    "DateTimeField": "timestamptz",
    "ForeignKey": "int8",
    "SmallIntegerField": "int2",
    "IntegerField": "int4",
    "BigIntegerField": "int8",
    "FloatField": "float8",
    "BooleanField": "bool",
    "CharField": "text",
    "BinaryField": "bytea",
}


@dataclass(frozen=True, slots=True)
class Submission:
    """One telemetry message from one node, as the gateway received it."""

    node_id: int
    message: Telemetry


@dataclass(slots=True)
class StoredBatch:
    """What a committed batch stored: each node's cursor after the commit and the new messages."""

    received_at: datetime
    cursors: dict[int, int] = field(default_factory=dict)
    stored: list[Submission] = field(default_factory=list)
    duplicates: int = 0
    gpu_rows: int = 0  # GPU samples stored (8 in an 8-GPU node's row)
    port_rows: int = 0  # port samples stored
    latest_ts: dict[int, float] = field(default_factory=dict)  # node -> sample ts now in the newest-sample tables


def write_batch(
    batch: Sequence[Submission], *, latest_not_before: Mapping[int, float] | None = None, using: str = "default"
) -> StoredBatch:
    """Store every new message of ``batch`` (rows, cursors, newest samples) in one transaction.

    A message whose seq is at or below its node's stored cursor, or repeats a seq already in this
    batch, is dropped. A node's newest-sample rows are refreshed unless its newest sample is older
    than ``latest_not_before[node]`` (the ingestor refreshes them every few seconds, not every
    second). Raises on a database error with nothing written.
    """
    connection = connections[using]
    result = StoredBatch(received_at=timezone.now())
    if not batch:
        return result
    node_ids = sorted({s.node_id for s in batch})  # one lock order for every writer: no deadlocks
    with transaction.atomic(using=using), connection.cursor() as cursor:
        stored_seq = lock_cursors(cursor, node_ids, "telemetry_seq", result.received_at)
        result.cursors = dict(stored_seq)
        seen: set[tuple[int, int]] = set()
        for submission in batch:
            key = (submission.node_id, submission.message.seq)
            if submission.message.seq <= stored_seq[submission.node_id] or key in seen:
                result.duplicates += 1
                continue
            seen.add(key)
            result.stored.append(submission)
            result.cursors[submission.node_id] = max(result.cursors[submission.node_id], submission.message.seq)
        if result.stored:
            rows = _rows(connection, result.stored, result.received_at, latest_not_before or {})
            try:
                _insert_samples(connection, cursor, NodeGpuSample, GPU_SAMPLE_COLUMNS, rows.gpus, rows.days)
                _insert_samples(connection, cursor, NodePortSample, PORT_SAMPLE_COLUMNS, rows.ports, rows.days)
            except DatabaseError:
                partition_days.forget()  # retention may have dropped a day this process thought it had
                raise
            _LATEST_GPUS.upsert(connection, cursor, [row for _, row in rows.newest_gpus.values()])
            _LATEST_PORTS.upsert(connection, cursor, [row for _, row in rows.newest_ports.values()])
            for newest in (rows.newest_gpus, rows.newest_ports):
                for (node_id, *_), (ts, _) in newest.items():
                    result.latest_ts[node_id] = max(ts, result.latest_ts.get(node_id, ts))
            advanced = {n: seq for n, seq in result.cursors.items() if seq != stored_seq[n]}
            advance_cursors(cursor, advanced, "telemetry_seq", result.received_at)
            result.gpu_rows, result.port_rows = rows.gpu_samples, rows.port_samples
    return result


# Cursors ---------------------------------------------------------------------------------------

_CURSOR_TABLE = TelemetryCursor._meta.db_table
_CURSOR_STREAMS = frozenset({"telemetry_seq", "events_seq"})


def lock_cursors(cursor: CursorWrapper, node_ids: Sequence[int], stream: str, now: datetime) -> dict[int, int]:
    """Each node's stored seq for ``stream``, with its cursor row locked until the transaction ends.

    A node seen for the first time gets a row at 0 (``ON CONFLICT DO NOTHING``: two processes may
    race to create it) before it is locked. On SQLite the transaction itself holds the write lock.
    """
    assert stream in _CURSOR_STREAMS
    found = _select_cursors(cursor, node_ids, stream)
    missing = [n for n in node_ids if n not in found]
    if missing:
        now = cursor.db.ops.adapt_datetimefield_value(now)
        for values, params in _values_lists([(node_id, now) for node_id in missing], row="(%s, %s, 0, 0)"):
            cursor.execute(
                f"INSERT INTO {_CURSOR_TABLE} (node_id, updated_at, telemetry_seq, events_seq) VALUES {values} "
                "ON CONFLICT (node_id) DO NOTHING",
                params,
            )
        found.update(_select_cursors(cursor, missing, stream))
    return found


# On PostgreSQL the node ids and seqs travel as arrays: the statement's text is then the same for
# every batch and psycopg parses it once, where a list of a few hundred placeholders was parsed again
# for every batch (~12% of the ingesting process's CPU in a profile at 800 agent messages a second).


def _select_cursors(cursor: CursorWrapper, node_ids: Sequence[int], stream: str) -> dict[int, int]:
    if cursor.db.vendor == "postgresql":
        cursor.execute(
            f"SELECT node_id, {stream} FROM {_CURSOR_TABLE} WHERE node_id = ANY(%s) ORDER BY node_id FOR UPDATE",
            [list(node_ids)],
        )
        return dict(cursor.fetchall())
    found: dict[int, int] = {}
    for start in range(0, len(node_ids), _CHUNK):
        chunk = node_ids[start : start + _CHUNK]
        placeholders = ", ".join(["%s"] * len(chunk))
        cursor.execute(
            f"SELECT node_id, {stream} FROM {_CURSOR_TABLE} WHERE node_id IN ({placeholders}) ORDER BY node_id", chunk
        )
        found.update(cursor.fetchall())
    return found


def advance_cursors(cursor: CursorWrapper, seqs: dict[int, int], stream: str, now: datetime) -> None:
    """Set each node's stored seq: one statement on PostgreSQL, one per few hundred nodes on SQLite."""
    assert stream in _CURSOR_STREAMS
    if not seqs:
        return
    now = cursor.db.ops.adapt_datetimefield_value(now)
    if cursor.db.vendor == "postgresql":
        cursor.execute(
            f"UPDATE {_CURSOR_TABLE} SET {stream} = v.seq, updated_at = %s "
            f"FROM unnest(%s::bigint[], %s::bigint[]) AS v (node_id, seq) WHERE {_CURSOR_TABLE}.node_id = v.node_id",
            [now, list(seqs), list(seqs.values())],
        )
        return
    for values, params in _values_lists(list(seqs.items())):
        cursor.execute(
            f"WITH v (node_id, seq) AS (VALUES {values}) UPDATE {_CURSOR_TABLE} "
            f"SET {stream} = v.seq, updated_at = %s FROM v WHERE {_CURSOR_TABLE}.node_id = v.node_id",
            [*params, now],
        )


def _values_lists(rows: list[tuple[Any, ...]], row: str = "(%s, %s)") -> Iterable[tuple[str, list[Any]]]:
    """``(%s, %s), (%s, %s), ...`` and its flattened parameters, a few hundred rows at a time."""
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start : start + _CHUNK]
        yield ", ".join([row] * len(chunk)), [value for values in chunk for value in values]


# Rows ------------------------------------------------------------------------------------------


Row = tuple[Any, ...]


Newest = dict[tuple[Any, ...], tuple[float, Row]]  # (node, GPU) or (node, device, port) -> (ts, row)


@dataclass(slots=True)
class _Rows:
    """What a batch writes: raw rows (one per node and sample, packed), the days they fall on, and the
    newest-sample rows of the nodes due for a refresh, by GPU and port."""

    gpus: list[Row] = field(default_factory=list)
    ports: list[Row] = field(default_factory=list)
    days: set[date] = field(default_factory=set)
    gpu_samples: int = 0
    port_samples: int = 0
    newest_gpus: Newest = field(default_factory=dict)
    newest_ports: Newest = field(default_factory=dict)


def _rows(
    connection: BaseDatabaseWrapper,
    stored: Iterable[Submission],
    received_at: datetime,
    latest_not_before: Mapping[int, float],
) -> _Rows:
    db_time = connection.ops.adapt_datetimefield_value  # psycopg: as is; SQLite: Django's text form
    received = db_time(received_at)
    astuple = msgspec.structs.astuple
    rows = _Rows()
    for submission in stored:
        node_id = submission.node_id
        due_from = latest_not_before.get(node_id, 0.0)
        for sample in submission.message.samples:
            moment = datetime.fromtimestamp(sample.ts, UTC)
            ts = db_time(moment)
            rows.days.add(day_of(moment))
            if sample.gpus:
                rows.gpus.append((node_id, ts, received, pack(GPU_PACKING, sample.gpus)))
                rows.gpu_samples += len(sample.gpus)
            if sample.ports:
                rows.ports.append((node_id, ts, received, pack(PORT_PACKING, sample.ports)))
                rows.port_samples += len(sample.ports)
            if sample.ts < due_from:
                continue
            head = (ts, received, node_id)
            for gpu in sample.gpus:
                _keep_newest(rows.newest_gpus, (node_id, gpu.index), sample.ts, head + astuple(gpu))
            for port in sample.ports:
                _keep_newest(rows.newest_ports, (node_id, port.device, port.port), sample.ts, head + astuple(port))
    return rows


def _keep_newest(newest: Newest, key: tuple[Any, ...], ts: float, row: Row) -> None:
    if key not in newest or newest[key][0] < ts:
        newest[key] = (ts, row)


def _insert_samples(
    connection: BaseDatabaseWrapper,
    cursor: CursorWrapper,
    model: type[Model],
    columns: Sequence[str],
    rows: list[Row],
    days: set[date],
) -> None:
    if not rows:
        return
    if connection.vendor == "postgresql":
        partition_days.make_room(cursor, model._meta.db_table, days)
    _bulk_insert(connection, cursor, model, columns, rows)


def _bulk_insert(
    connection: BaseDatabaseWrapper,
    cursor: CursorWrapper,
    model: type[Model],
    columns: Sequence[str],
    rows: list[tuple[Any, ...]],
    *,
    table: str | None = None,
) -> None:
    """Append rows to ``model``'s table (or ``table``, shaped like it): binary COPY on PostgreSQL."""
    if not rows:
        return
    table = table or model._meta.db_table
    if connection.vendor == "postgresql":
        types = binary_types(model, columns)
        with (
            connection.wrap_database_errors,
            cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT BINARY)") as copy,
        ):
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)
    else:
        placeholders = ", ".join(["%s"] * len(columns))
        cursor.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders})", rows)


def binary_types(model: type[Model], columns: Sequence[str]) -> list[str]:
    by_column = {f.column: f for f in model._meta.concrete_fields}
    return [_PG_BINARY_TYPES[by_column[column].get_internal_type()] for column in columns]


@dataclass(frozen=True)
class _LatestTable:
    """A newest-sample table: one row per GPU (or port), replaced whole by a newer sample, never by
    an older one (a replay).

    On PostgreSQL the rows are copied into a temporary table and upserted from it in one
    statement: ``executemany`` costs a round trip per row (~0.25 ms each, 2,000 per batch).
    """

    model: type[Model]
    columns: tuple[str, ...]
    key: tuple[str, ...]

    @property
    def table(self) -> str:
        return self.model._meta.db_table

    @property
    def stage(self) -> str:
        return f"{self.table}_stage"  # per-session temporary table, emptied at each commit

    @property
    def on_conflict_newer(self) -> str:
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in self.columns if c not in self.key)
        return f"ON CONFLICT ({', '.join(self.key)}) DO UPDATE SET {updates} WHERE {self.table}.ts < EXCLUDED.ts"

    def upsert(self, connection: BaseDatabaseWrapper, cursor: CursorWrapper, rows: list[Row]) -> None:
        if not rows:
            return
        columns = ", ".join(self.columns)
        if connection.vendor == "postgresql":
            stage = f"CREATE TEMPORARY TABLE IF NOT EXISTS {self.stage} (LIKE {self.table}) ON COMMIT DELETE ROWS"
            cursor.execute(stage)
            _bulk_insert(connection, cursor, self.model, self.columns, rows, table=self.stage)
            cursor.execute(
                f"INSERT INTO {self.table} ({columns}) SELECT {columns} FROM {self.stage} {self.on_conflict_newer}"
            )
        else:
            placeholders = ", ".join(["%s"] * len(self.columns))
            cursor.executemany(
                f"INSERT INTO {self.table} ({columns}) VALUES ({placeholders}) {self.on_conflict_newer}", rows
            )


_LATEST_GPUS = _LatestTable(LatestGpuSample, GPU_COLUMNS, key=("node_id", "gpu_index"))
_LATEST_PORTS = _LatestTable(LatestPortSample, PORT_COLUMNS, key=("node_id", "device", "port"))
