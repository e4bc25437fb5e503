"""The bulk writer: many nodes' telemetry messages, their cursors and newest samples, one transaction.

Each sample becomes one row of its node's GPUs and one of its ports, packed (models/samples.py), so
1,000 nodes' second is 2,000 rows, not 16,000. On PostgreSQL they go in with binary ``COPY``
(psycopg 3 ``write_row``), the fastest path the server offers (DESIGN.md: ~460,000 rows/s against
~109,000 for ``executemany``), into the day's partition, which the writer creates if a scheduled task
has not (partitions.py); on SQLite, the demo's database, with ``executemany``. Never a row at a time.

Dedup is by sequence number: each node's cursor row is advanced to the batch's highest seq first
thing in the transaction, in one statement that locks it and returns what it held (cursors.py); a
message whose seq is at or below that is dropped. Reading the cursor under a row lock every batch
rather than trusting a copy held in memory is what keeps two server processes from both storing a
node's replay after its agent reconnects to the other one.
"""

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from operator import itemgetter
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Model
from django.utils import timezone

from agents.protocol import Telemetry
from apps.telemetry.cursors import claim_telemetry_seqs
from apps.telemetry.models import (
    GPU_METRIC_FIELDS,
    GPU_PACKING,
    PORT_PACKING,
    PORT_SAMPLE_FIELDS,
    LatestGpuSample,
    LatestPortSample,
    NodeGpuSample,
    NodePortSample,
)
from apps.telemetry.models.samples import items
from apps.telemetry.partitions import day_of, partition_days

log = logging.getLogger(__name__)

# Column order of a copied raw row; of a newest-sample row: (ts, received_at, node_id) + the protocol
# struct's fields, in the packing's order (``samples.items``).
GPU_SAMPLE_COLUMNS: tuple[str, ...] = ("node_id", "ts", "received_at", "gpus")
PORT_SAMPLE_COLUMNS: tuple[str, ...] = ("node_id", "ts", "received_at", "ports")
GPU_COLUMNS: tuple[str, ...] = ("ts", "received_at", "node_id", "gpu_index", *GPU_METRIC_FIELDS)
PORT_COLUMNS: tuple[str, ...] = ("ts", "received_at", "node_id", *PORT_SAMPLE_FIELDS)

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
    highest: dict[int, int] = {}
    for submission in batch:
        node_id, seq = submission.node_id, submission.message.seq
        highest[node_id] = max(seq, highest.get(node_id, seq))
    with transaction.atomic(using=using), connection.cursor() as cursor:
        # Each cursor advanced to the batch's highest seq at once, returning what it held: the
        # messages at or below that were stored before and are dropped below, in this transaction.
        stored_seq = claim_telemetry_seqs(cursor, highest, result.received_at)
        result.cursors = {node_id: max(seq, stored_seq[node_id]) for node_id, seq in highest.items()}
        seen: set[tuple[int, int]] = set()
        for submission in batch:
            key = (submission.node_id, submission.message.seq)
            if submission.message.seq <= stored_seq[submission.node_id] or key in seen:
                result.duplicates += 1
                continue
            seen.add(key)
            result.stored.append(submission)
        if result.stored:
            rows = _rows(connection, result.stored, result.received_at, latest_not_before or {})
            try:
                _insert_samples(connection, cursor, NodeGpuSample, GPU_SAMPLE_COLUMNS, rows.gpus, rows.days)
                _insert_samples(connection, cursor, NodePortSample, PORT_SAMPLE_COLUMNS, rows.ports, rows.days)
            except DatabaseError:
                partition_days.forget()  # retention may have dropped a day this process thought it had
                raise
            _LATEST_GPUS.upsert(connection, cursor, rows.newest_gpus)
            _LATEST_PORTS.upsert(connection, cursor, rows.newest_ports)
            result.latest_ts = rows.latest_ts
            result.gpu_rows, result.port_rows = rows.gpu_samples, rows.port_samples
    return result


# Rows ------------------------------------------------------------------------------------------


Row = tuple[Any, ...]
Due = tuple[float, Any, list[Row], list[Row]]  # a sample due for the newest rows: (ts, db ts, GPUs, ports)
_GPU_KEY, _PORT_KEY = itemgetter(0), itemgetter(0, 1)  # a GPU reading's index; a port's device and number


@dataclass(slots=True)
class _Rows:
    """What a batch writes: raw rows (one per node and sample, packed), the days they fall on, and the
    newest-sample rows of the nodes due for a refresh, one per GPU and port."""

    gpus: list[Row] = field(default_factory=list)
    ports: list[Row] = field(default_factory=list)
    days: set[date] = field(default_factory=set)
    gpu_samples: int = 0
    port_samples: int = 0
    newest_gpus: list[Row] = field(default_factory=list)
    newest_ports: list[Row] = field(default_factory=list)
    latest_ts: dict[int, float] = field(default_factory=dict)  # node -> its newest rows' sample ts


def _rows(
    connection: BaseDatabaseWrapper,
    stored: Iterable[Submission],
    received_at: datetime,
    latest_not_before: Mapping[int, float],
) -> _Rows:
    """Each sample's items are made once (``items``) and serve both its packed row and, when the node is
    due, its newest rows: this runs for every sample of the fleet, at 1,000 nodes 1,000 times a second."""
    db_time = connection.ops.adapt_datetimefield_value  # psycopg: as is; SQLite: Django's text form
    received = db_time(received_at)
    pack_gpus, pack_ports = GPU_PACKING.pack, PORT_PACKING.pack
    rows = _Rows()
    due: dict[int, list[Due]] = {}
    for submission in stored:
        node_id = submission.node_id
        due_from = latest_not_before.get(node_id, 0.0)
        for sample in submission.message.samples:
            moment = datetime.fromtimestamp(sample.ts, UTC)
            ts = db_time(moment)
            rows.days.add(day_of(moment))
            gpus, ports = items(GPU_PACKING, sample.gpus), items(PORT_PACKING, sample.ports)
            if gpus:
                rows.gpus.append((node_id, ts, received, pack_gpus(gpus)))
                rows.gpu_samples += len(gpus)
            if ports:
                rows.ports.append((node_id, ts, received, pack_ports(ports)))
                rows.port_samples += len(ports)
            if sample.ts >= due_from and (gpus or ports):
                due.setdefault(node_id, []).append((sample.ts, ts, gpus, ports))
    for node_id, samples in due.items():
        _add_newest(rows, node_id, samples, received)
    return rows


def _add_newest(rows: _Rows, node_id: int, samples: list[Due], received: Any) -> None:
    """The node's newest row of each GPU (by index) and port (by device and number) among ``samples``:
    from the newest sample that has it, the first of those with the same time."""
    if len(samples) > 1:
        samples = sorted(samples, key=itemgetter(0), reverse=True)  # stable: the first of a time stays first
    rows.latest_ts[node_id] = samples[0][0]
    seen: set[Any] = set()  # GPU indices (ints) and ports' (device, number)
    for _, ts, gpus, ports in samples:
        head = (ts, received, node_id)
        for newest, key, readings in ((rows.newest_gpus, _GPU_KEY, gpus), (rows.newest_ports, _PORT_KEY, ports)):
            for reading in readings:
                if (found := key(reading)) not in seen:  # one row per key: an upsert may not touch a row twice
                    seen.add(found)
                    newest.append(head + reading)


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
