"""copy_ratio: GPU samples/s of the product's telemetry writer (storage.write_batch) over a raw binary
COPY of the same rows into the same table (the compact layout: one row per node and sample, its GPUs
packed), measured in the same run on PostgreSQL.

The writer does everything a production batch does: lock and read the nodes' cursors, drop
duplicates, pack each sample's GPUs into a row, COPY the rows, refresh each GPU's newest row (every
LATEST_REFRESH_S of sample time, as the ingestor asks) and advance the cursors, in one
transaction. The raw COPY gets the packed rows ready-made and does nothing else. Both write batches
shaped like production ones (250 nodes x 8 GPUs, every field reported: what arrives in 250 ms at
1,000 nodes), alternating, and each figure is the median of the runs. A text-format COPY is
measured alongside for the record.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/copy_ratio.py

Target: copy_ratio >= 0.5. The last line printed is JSON.
"""

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scratch_database import scratch_postgresql

GPUS_PER_NODE = 8
BASE_TS = 1_767_225_600.0


def _gpu(index: int, second: int) -> Any:
    from agents.protocol import GpuSample

    busy = 90.0 + (second + index) % 10
    return GpuSample(
        index=index,
        util_gpu=busy,
        util_mem=busy / 2,
        mem_used_mib=70_000 + index,
        temp_c=65.0 + index / 2,
        power_w=650.0 + index,
        power_limit_w=700.0,
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        throttle_reasons=0,
        ecc_corrected_volatile=0,
        ecc_uncorrected_volatile=0,
        ecc_corrected_aggregate=3,
        ecc_uncorrected_aggregate=0,
        retired_pages_pending=False,
        remapped_rows_pending=False,
        remapped_rows_failed=False,
        remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0,
        pcie_replay_count=0,
        nvlink_crc_errors=0,
        nvlink_replay_errors=0,
        nvlink_recovery_errors=0,
        pcie_tx_kbps=1_000_000,
        pcie_rx_kbps=900_000,
        nvlink_tx_kbps=50_000_000,
        nvlink_rx_kbps=50_000_000,
        recovery_action=0,
    )


def make_batches(nodes: int, batches: int, first_second: int) -> list[list[Any]]:
    """``batches`` batches, each one message (one 1-second sample of 8 GPUs) from every node."""
    from agents.protocol import NodeSample, Telemetry
    from apps.telemetry.storage import Submission

    return [
        [
            Submission(
                node_id,
                Telemetry(
                    seq=first_second + b + 1,
                    samples=[
                        NodeSample(
                            ts=BASE_TS + first_second + b,
                            gpus=[_gpu(i, first_second + b) for i in range(GPUS_PER_NODE)],
                        )
                    ],
                ),
            )
            for node_id in range(1, nodes + 1)
        ]
        for b in range(batches)
    ]


def ready_rows(batches: list[list[Any]]) -> list[list[tuple[Any, ...]]]:
    """The packed rows the writer would copy, built in advance (the raw COPY pays nothing for them)."""
    from apps.telemetry.models import GPU_PACKING
    from apps.telemetry.models.samples import pack

    received = datetime.now(UTC)
    return [
        [
            (s.node_id, datetime.fromtimestamp(sample.ts, UTC), received, pack(GPU_PACKING, sample.gpus))
            for s in batch
            for sample in s.message.samples
        ]
        for batch in batches
    ]


def timed_writer(batches: list[list[Any]], latest_due: dict[int, float]) -> float:
    """write_batch as the ingestor calls it: each node's newest rows refreshed every LATEST_REFRESH_S."""
    from apps.telemetry.ingest import LATEST_REFRESH_S
    from apps.telemetry.storage import write_batch

    rows = 0
    started = time.perf_counter()
    for batch in batches:
        stored = write_batch(batch, latest_not_before=latest_due)
        latest_due.update((node_id, ts + LATEST_REFRESH_S) for node_id, ts in stored.latest_ts.items())
        rows += stored.gpu_rows
    return rows / (time.perf_counter() - started)


def timed_raw_copy(row_batches: list[list[tuple[Any, ...]]], *, binary: bool) -> float:
    """GPU samples/s of a bare COPY of the packed rows (the day's partition made beforehand)."""
    from django.db import connection, transaction

    from apps.telemetry.models import GPU_PACKING, NodeGpuSample
    from apps.telemetry.partitions import day_of, partition_days
    from apps.telemetry.storage import GPU_SAMPLE_COLUMNS, binary_types

    table, columns = NodeGpuSample._meta.db_table, ", ".join(GPU_SAMPLE_COLUMNS)
    with transaction.atomic(), connection.cursor() as cursor:
        partition_days.make_room(cursor, table, {day_of(row[1]) for batch in row_batches for row in batch})
    statement = f"COPY {table} ({columns}) FROM STDIN" + (" WITH (FORMAT BINARY)" if binary else "")
    types = binary_types(NodeGpuSample, GPU_SAMPLE_COLUMNS)
    samples = sum(GPU_PACKING.count(row[3]) for batch in row_batches for row in batch)
    started = time.perf_counter()
    for batch in row_batches:
        with transaction.atomic(), connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
            if binary:
                copy.set_types(types)
            for row in batch:
                copy.write_row(row)
    return samples / (time.perf_counter() - started)


def measure_copy_ratio(*, nodes: int = 250, batches: int = 20, runs: int = 3) -> dict[str, Any]:
    """Needs Django set up on a PostgreSQL database (see scratch_database). Writes into it."""
    writer, binary, text = [], [], []
    latest_due: dict[int, float] = {}
    for run in range(runs + 1):  # run 0 warms up caches, connections and the table; not counted
        messages = make_batches(nodes, batches, first_second=run * batches)
        rows = ready_rows(messages)
        figures = (
            timed_writer(messages, latest_due),
            timed_raw_copy(rows, binary=True),
            timed_raw_copy(rows, binary=False),
        )
        if run:
            for series, figure in zip((writer, binary, text), figures, strict=True):
                series.append(figure)
    result = {
        "copy_ratio": round(statistics.median(writer) / statistics.median(binary), 3),
        "writer_gpu_samples_per_s": round(statistics.median(writer)),
        "binary_copy_gpu_samples_per_s": round(statistics.median(binary)),
        "text_copy_gpu_samples_per_s": round(statistics.median(text)),
        "batch_gpu_rows": nodes * GPUS_PER_NODE,
        "batches_per_run": batches,
        "runs": runs,
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=250, help="nodes per batch (x 8 GPU rows)")
    parser.add_argument("--batches", type=int, default=20, help="batches per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with scratch_postgresql("bench_copy_ratio"):
        result = measure_copy_ratio(nodes=args.nodes, batches=args.batches, runs=args.runs)
    print(
        f"storage.write_batch  {result['writer_gpu_samples_per_s']:>10,} GPU samples/s"
        "  (cursors, dedup, packing, newest rows included)"
    )
    print(f"raw binary COPY      {result['binary_copy_gpu_samples_per_s']:>10,} GPU samples/s  (rows ready-made)")
    print(f"raw text COPY        {result['text_copy_gpu_samples_per_s']:>10,} GPU samples/s")
    print(f"copy_ratio           {result['copy_ratio']:.3f}  (target >= 0.5)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
