"""The bulk writer: many nodes' telemetry messages, their cursors and newest samples, one transaction.

Each sample becomes one row of its node's GPUs and one of its ports, packed (models/samples.py), so
1,000 nodes' second is 2,000 rows, not 16,000. On PostgreSQL they go in with binary ``COPY``
(psycopg 3 ``write_row``), the fastest path the server offers (DESIGN.md: ~460,000 rows/s against
~109,000 for ``executemany``), into the day's partition, which the writer creates if a scheduled task
has not (partitions.py); on SQLite, the demo's database, with ``executemany``. Never a row at a time.

Dedup is by sequence number: each node's cursor is claimed at the batch's highest seq first thing
in the transaction, returning what it held (cursors.py; on PostgreSQL one log row under the writers'
lock, seqlog.py), while this process packs the batch and refreshes the due newest rows; a message
whose seq is at or below what was stored is dropped. Claiming under a lock that every writer takes,
and learning what the others stored since, rather than trusting what this process stored itself, is
what keeps two server processes from both storing a node's replay after its agent reconnects to the
other one.
"""

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Model
from django.utils import timezone

from agents.protocol import Telemetry
from apps.telemetry.cursors import claim_telemetry_seqs
from apps.telemetry.models import (
    GPU_PACKING,
    PORT_PACKING,
    LatestGpuSample,
    LatestPortSample,
    NodeGpuSample,
    NodePortSample,
)
from apps.telemetry.partitions import partition_days

log = logging.getLogger(__name__)

# Column order of a copied raw row, and of a newest-sample row (the same row, upserted).
GPU_SAMPLE_COLUMNS: tuple[str, ...] = ("node_id", "ts", "received_at", "gpus")
PORT_SAMPLE_COLUMNS: tuple[str, ...] = ("node_id", "ts", "received_at", "ports")

# PostgreSQL type of each Django field kind, for binary COPY (which sends no type inference).
_PG_BINARY_TYPES = {
    "DateTimeField": "timestamptz",
    "ForeignKey": "int8",
    "OneToOneField": "int8",
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
    highest: dict[int, int] = {}
    lowest: dict[int, int] = {}  # a node's lowest seq: at or below what was stored, its replay is confirmed
    for submission in batch:
        node_id, seq = submission.node_id, submission.message.seq
        highest[node_id] = max(seq, highest.get(node_id, seq))
        lowest[node_id] = min(seq, lowest.get(node_id, seq))
    due = latest_not_before or {}
    with transaction.atomic(using=using), connection.cursor() as cursor:

        def pack_and_refresh_newest() -> _Rows:
            rows = _rows(connection, batch, result.received_at, due)
            # The whole batch's newest rows, replays included: a replayed sample was stored before,
            # and a newest row never moves back in time. On PostgreSQL in the claim's pipeline.
            _LATEST_GPUS.upsert(connection, cursor, rows.newest_gpus)
            _LATEST_PORTS.upsert(connection, cursor, rows.newest_ports)
            return rows

        # Each cursor advanced to the batch's highest seq at once, returning what it held: the
        # messages at or below that were stored before and are dropped below, in this transaction.
        # The whole batch is packed meanwhile, and packed again without them in the rare batch
        # that has any (an agent's replay).
        stored_seq, rows = claim_telemetry_seqs(cursor, highest, lowest, result.received_at, pack_and_refresh_newest)
        result.cursors = {node_id: max(seq, stored_seq[node_id]) for node_id, seq in highest.items()}
        result.latest_ts = rows.latest_ts()
        seen: set[tuple[int, int]] = set()
        for submission in batch:
            key = (submission.node_id, submission.message.seq)
            if submission.message.seq <= stored_seq[submission.node_id] or key in seen:
                result.duplicates += 1
                continue
            seen.add(key)
            result.stored.append(submission)
        if result.duplicates:
            rows = _rows(connection, result.stored, result.received_at, {})
        if result.stored:
            try:
                _insert_samples(connection, cursor, NodeGpuSample, GPU_SAMPLE_COLUMNS, rows.gpus, rows.days)
                _insert_samples(connection, cursor, NodePortSample, PORT_SAMPLE_COLUMNS, rows.ports, rows.days)
            except DatabaseError:
                partition_days.forget()  # retention may have dropped a day this process thought it had
                raise
            result.gpu_rows, result.port_rows = rows.gpu_samples, rows.port_samples
    return result


# Rows ------------------------------------------------------------------------------------------


Row = tuple[Any, ...]  # (node id, db ts, db received_at, packed)
Newest = tuple[float, Row]  # a node's newest row so far: its sample's ts, the row


@dataclass(slots=True)
class _Rows:
    """What a batch writes: raw rows (one per node and sample, packed), the days they fall on, and the
    newest row of each node due for a refresh (the same rows, one GPU row and one port row a node)."""

    gpus: list[Row] = field(default_factory=list)
    ports: list[Row] = field(default_factory=list)
    days: set[date] = field(default_factory=set)
    gpu_samples: int = 0
    port_samples: int = 0
    newest_gpus: dict[int, Newest] = field(default_factory=dict)
    newest_ports: dict[int, Newest] = field(default_factory=dict)

    def latest_ts(self) -> dict[int, float]:
        """Each refreshed node's newest sample ts."""
        found = {node_id: ts for node_id, (ts, _) in self.newest_gpus.items()}
        for node_id, (ts, _) in self.newest_ports.items():
            found[node_id] = max(ts, found.get(node_id, ts))
        return found


def _rows(
    connection: BaseDatabaseWrapper,
    stored: Iterable[Submission],
    received_at: datetime,
    latest_not_before: Mapping[int, float],
) -> _Rows:
    """Each sample packed into its node's rows; a due node's newest rows are the newest of them (the
    first of those with the same time). This runs for every sample of the fleet, at 1,000 nodes 1,000
    times a second."""
    # psycopg takes datetimes as they are; SQLite wants Django's text form of each. Locals throughout:
    # at 250 nodes a batch the loop's own lookups cost as much as packing the GPUs.
    db_time = None if connection.vendor == "postgresql" else connection.ops.adapt_datetimefield_value
    received = received_at if db_time is None else db_time(received_at)
    pack_gpus, pack_ports, fromtimestamp = GPU_PACKING.pack_objects, PORT_PACKING.pack_objects, datetime.fromtimestamp
    rows = _Rows()
    gpu_rows, port_rows, newest_gpus, newest_ports = rows.gpus, rows.ports, rows.newest_gpus, rows.newest_ports
    epoch_days: set[int] = set()
    gpu_samples = port_samples = 0
    for submission in stored:
        node_id = submission.node_id
        due_from = latest_not_before.get(node_id, 0.0)
        for sample in submission.message.samples:
            sample_ts = sample.ts
            moment = fromtimestamp(sample_ts, UTC)
            ts = moment if db_time is None else db_time(moment)
            epoch_days.add(int(sample_ts // _DAY_S))
            due = sample_ts >= due_from
            if readings := sample.gpus:
                row = (node_id, ts, received, pack_gpus(readings))
                gpu_rows.append(row)
                gpu_samples += len(readings)
                if due and sample_ts > newest_gpus.get(node_id, _NEVER)[0]:
                    newest_gpus[node_id] = (sample_ts, row)
            if readings := sample.ports:
                row = (node_id, ts, received, pack_ports(readings))
                port_rows.append(row)
                port_samples += len(readings)
                if due and sample_ts > newest_ports.get(node_id, _NEVER)[0]:
                    newest_ports[node_id] = (sample_ts, row)
    rows.gpu_samples, rows.port_samples = gpu_samples, port_samples
    rows.days = {_EPOCH + timedelta(days=day) for day in epoch_days}  # as partitions.day_of gives them
    return rows


_DAY_S = 86_400.0
_EPOCH = date(1970, 1, 1)
_NEVER: Newest = (float("-inf"), ())


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
    """A newest-sample table: one row per node, replaced whole by a newer sample, never by an older
    one (a replay).

    On PostgreSQL the rows go in as four binary arrays in one prepared statement (``unnest``): 1.4 ms
    for 250 nodes where copying them into a temporary table and upserting from it took 3.5. The rows
    need no order of their own: the batch's cursor rows, claimed first and in node order, already
    keep two writers of the same nodes apart.
    """

    model: type[Model]
    columns: tuple[str, ...]

    @property
    def table(self) -> str:
        return self.model._meta.db_table

    @property
    def on_conflict_newer(self) -> str:
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in self.columns[1:])
        return f"ON CONFLICT (node_id) DO UPDATE SET {updates} WHERE {self.table}.ts < EXCLUDED.ts"

    def upsert(self, connection: BaseDatabaseWrapper, cursor: CursorWrapper, newest: dict[int, Newest]) -> None:
        if not newest:
            return
        columns = ", ".join(self.columns)
        rows = [row for _, row in newest.values()]
        if connection.vendor == "postgresql":
            arrays = ", ".join(f"%b::{kind}[]" for kind in binary_types(self.model, self.columns))
            with connection.wrap_database_errors, psycopg.Cursor(cursor.cursor.connection) as binary:
                binary.execute(
                    f"INSERT INTO {self.table} ({columns}) SELECT * FROM unnest({arrays}) {self.on_conflict_newer}",
                    [list(column) for column in zip(*rows, strict=True)],
                    prepare=True,
                )
        else:
            placeholders = ", ".join(["%s"] * len(self.columns))
            cursor.executemany(
                f"INSERT INTO {self.table} ({columns}) VALUES ({placeholders}) {self.on_conflict_newer}", rows
            )


_LATEST_GPUS = _LatestTable(LatestGpuSample, GPU_SAMPLE_COLUMNS)
_LATEST_PORTS = _LatestTable(LatestPortSample, PORT_SAMPLE_COLUMNS)
