"""copy_ratio: GPU samples/s of the product's telemetry writer (storage.write_batch) over a raw binary
COPY of the same rows into the same table (the compact layout: one row per node and sample, its GPUs
packed), measured in the same run on PostgreSQL.

The writer does everything a production batch does: lock and read the nodes' cursors, drop
duplicates, pack each sample's GPUs into a row, COPY the rows, refresh each GPU's newest row (every
LATEST_REFRESH_S of sample time, as the ingestor asks) and advance the cursors, in one
transaction. The raw COPY gets the packed rows ready-made and does nothing else. Both write batches
shaped like production ones (250 nodes x 8 GPUs, every field reported: what arrives in 250 ms at
1,000 nodes), taking turns batch by batch, and each figure is from the median batch time. A
text-format COPY is measured alongside for the record.

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


class Writer:
    """write_batch as the ingestor calls it: each node's newest rows refreshed every LATEST_REFRESH_S."""

    def __init__(self) -> None:
        self.latest_due: dict[int, float] = {}

    def seconds(self, batch: list[Any]) -> float:
        from apps.telemetry.ingest import LATEST_REFRESH_S
        from apps.telemetry.storage import write_batch

        started = time.perf_counter()
        stored = write_batch(batch, latest_not_before=self.latest_due)
        elapsed = time.perf_counter() - started
        self.latest_due.update((node_id, ts + LATEST_REFRESH_S) for node_id, ts in stored.latest_ts.items())
        assert stored.gpu_rows == len(batch) * GPUS_PER_NODE, "the writer dropped samples"
        return elapsed


class RawCopy:
    """A bare COPY of ready-made packed rows, one transaction a batch, the day's partition made beforehand."""

    def __init__(self, *, binary: bool) -> None:
        from apps.telemetry.models import NodeGpuSample
        from apps.telemetry.storage import GPU_SAMPLE_COLUMNS, binary_types

        self.binary = binary
        self.table = NodeGpuSample._meta.db_table
        self.statement = f"COPY {self.table} ({', '.join(GPU_SAMPLE_COLUMNS)}) FROM STDIN" + (
            " WITH (FORMAT BINARY)" if binary else ""
        )
        self.types = binary_types(NodeGpuSample, GPU_SAMPLE_COLUMNS)

    def seconds(self, rows: list[tuple[Any, ...]]) -> float:
        from django.db import connection, transaction

        from apps.telemetry.partitions import day_of, partition_days

        with transaction.atomic(), connection.cursor() as cursor:
            partition_days.make_room(cursor, self.table, {day_of(row[1]) for row in rows})
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cursor, cursor.cursor.copy(self.statement) as copy:
            if self.binary:
                copy.set_types(self.types)
            for row in rows:
                copy.write_row(row)
        return time.perf_counter() - started


def measure_copy_ratio(*, nodes: int = 250, batches: int = 300, warmup: int = 20) -> dict[str, Any]:
    """Needs Django set up on a PostgreSQL database (see scratch_database). Writes into it.

    The writer, the binary COPY and the text COPY take turns batch by batch (the order rotating), so
    that the machine's load, which swings by a quarter within seconds on a shared machine, falls on
    all three alike; each figure is from the median batch time, the first ``warmup`` turns not
    counted (caches, prepared statements, the partition)."""
    writer, binary, text = Writer(), RawCopy(binary=True), RawCopy(binary=False)
    times: dict[str, list[float]] = {"writer": [], "binary": [], "text": []}
    messages = make_batches(nodes, batches + warmup, first_second=0)
    for turn, (batch, rows) in enumerate(zip(messages, ready_rows(messages), strict=True)):
        turns: list[tuple[str, Any, Any]] = [("writer", writer, batch), ("binary", binary, rows), ("text", text, rows)]
        shift = turn % len(turns)
        for name, timed, work in turns[shift:] + turns[:shift]:
            elapsed = timed.seconds(work)
            if turn >= warmup:
                times[name].append(elapsed)
    samples = nodes * GPUS_PER_NODE
    rate = {name: samples / statistics.median(series) for name, series in times.items()}
    return {
        "copy_ratio": round(rate["writer"] / rate["binary"], 3),
        # The mean counts what a median leaves out: the writer folding the cursors' log into their rows
        # every few dozen batches (apps/telemetry/seqlog.py), and a busy machine's slow batches.
        "copy_ratio_of_means": round(statistics.mean(times["binary"]) / statistics.mean(times["writer"]), 3),
        "writer_gpu_samples_per_s": round(rate["writer"]),
        "binary_copy_gpu_samples_per_s": round(rate["binary"]),
        "text_copy_gpu_samples_per_s": round(rate["text"]),
        "writer_batch_ms_p50": round(statistics.median(times["writer"]) * 1e3, 3),
        "writer_batch_ms_mean": round(statistics.mean(times["writer"]) * 1e3, 3),
        "binary_copy_batch_ms_p50": round(statistics.median(times["binary"]) * 1e3, 3),
        "batch_gpu_rows": samples,
        "batches": batches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=250, help="nodes per batch (x 8 GPU rows)")
    parser.add_argument("--batches", type=int, default=300, help="batches timed, each way")
    args = parser.parse_args()
    with scratch_postgresql("bench_copy_ratio"):
        result = measure_copy_ratio(nodes=args.nodes, batches=args.batches)
    print(
        f"storage.write_batch  {result['writer_gpu_samples_per_s']:>10,} GPU samples/s"
        "  (cursors, dedup, packing, newest rows included)"
    )
    print(f"raw binary COPY      {result['binary_copy_gpu_samples_per_s']:>10,} GPU samples/s  (rows ready-made)")
    print(f"raw text COPY        {result['text_copy_gpu_samples_per_s']:>10,} GPU samples/s")
    print(
        f"copy_ratio           {result['copy_ratio']:.3f}  (target >= 0.5; of the mean batch times: "
        f"{result['copy_ratio_of_means']:.3f})"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
