"""NCCL all-reduce bus bandwidth, inside the node or across nodes, launched with torchrun.

For each size of the sweep: algbw = bytes ÷ time per all-reduce, and busbw = algbw × 2(n−1)/n for
n ranks, as nccl-tests defines it (doc/PERFORMANCE.md: every element makes 2(n−1) transfers over n
links, so busbw is comparable with a link's speed whatever n is; one rank has no link, and 0). GB/s
are 10⁹ bytes a second. Judged: busbw at the sweep's largest size against ``min_busbw_gbps``, or
``min_busbw_fraction`` (0.8) of ``theoretical_busbw_gbps``, the fabric's figure; and the elements
that came out wrong, which must be none.

In the node: ``torchrun --standalone --nproc-per-node N`` (one rank per GPU; on the CPU the gloo
backend with 2 ranks by default, and every figure says ``cpu``). Across nodes every node's agent
runs this check with the same ``nnodes`` and ``rendezvous`` (node 0's host:port) and its own
``node_rank``. NCCL picks its algorithm by size and topology, and on two nodes or more a tree can
beat what the network alone gives; so there the check also measures with ``NCCL_ALGO=Ring`` (a
second launch, at the rendezvous port + 1), and says which algorithm each figure used.

When nccl-tests' ``all_reduce_perf`` is on PATH, a GPU node's in-node run uses it instead (its own
busbw, out-of-place), unless ``implementation`` says "torch".
"""

import itertools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import msgspec

from agents.executors.allreduce_worker import WorkerParams, WorkerReport
from agents.executors.context import CheckContext
from agents.executors.params import KIB, MIB, AllReduceParams
from agents.executors.results import measurement, significant
from agents.executors.runtime import CheckUnavailable, Devices, require_torch, select_devices
from agents.executors.tools import nccl_tests
from agents.executors.tools.process import ToolRun, run_tool
from agents.protocol import CheckLog, CheckMeasurement, CheckProgress, ProtocolError, decode_check_line

DEFAULT_SIZES: Final = {
    "cuda": [MIB * 4**k for k in range(8)],  # 1 MiB .. 16 GiB
    "cpu": [4 * KIB * 4**k for k in range(6)],  # 4 KiB .. 4 MiB
}
DEFAULT_CPU_RANKS: Final = 2
NCCL_TESTS: Final = "all_reduce_perf"
NCCL_TESTS_DTYPES: Final = {"fp32": "float", "bf16": "bfloat16", "fp16": "half"}
DEFAULT_ALGORITHM: Final = {"nccl": "NCCL's choice (NCCL_ALGO unset)", "gloo": "gloo's own"}
_worker_lines = msgspec.json.Decoder(WorkerReport)


@dataclass(frozen=True)
class SweepRow:
    size_bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None


@dataclass(frozen=True)
class Sweep:
    algorithm: str
    ranks: int
    rows: list[SweepRow]
    evidence: dict[str, object]


def bus_bandwidth(algbw_gbps: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw × 2(n−1)/n."""
    return algbw_gbps * 2 * (ranks - 1) / ranks


def sweep_rows(sizes_and_times: list[tuple[int, float, int | None]], ranks: int) -> list[SweepRow]:
    rows = []
    for size, time_us, wrong in sizes_and_times:
        algbw = size / (time_us / 1e6) / 1e9
        rows.append(SweepRow(size, time_us, algbw, bus_bandwidth(algbw, ranks), wrong))
    return rows


def run(params: AllReduceParams, ctx: CheckContext) -> None:
    torch = require_torch()
    devices = select_devices(torch, params.device, params.gpus)
    cuda = devices.kind == "cuda"
    backend = "nccl" if cuda else "gloo"
    nproc = params.nproc_per_node or (len(devices.gpus) if cuda else DEFAULT_CPU_RANKS)
    if cuda and nproc > len(devices.gpus):
        raise CheckUnavailable(f"nproc_per_node {nproc} is more than the {len(devices.gpus)} GPUs given")
    sizes = params.sizes_bytes or DEFAULT_SIZES[devices.kind]
    use_nccl_tests = _use_nccl_tests(params, ctx, cuda)
    ring = params.ring if params.ring is not None else params.nnodes > 1
    algorithms: list[str | None] = [None, "Ring"] if ring and cuda else [None]
    tool = f"nccl-tests {NCCL_TESTS}" if use_nccl_tests else f"{devices.tool} {backend} via torchrun"
    ctx.result.ran_on(devices.kind, devices.name, tool)
    ctx.result.evidence.update(
        backend=backend,
        ranks=nproc * params.nnodes,
        nnodes=params.nnodes,
        nproc_per_node=nproc,
        dtype=params.dtype,
        busbw="algbw × 2(n−1)/n, as nccl-tests defines it for all-reduce",
        nccl_environment={k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_") and k != "NCCL_ALGO"},
    )
    if ring and not cuda:
        ctx.result.evidence["ring"] = "not measured: NCCL_ALGO is NCCL's; gloo has no such choice"
    for attempt, algorithm in enumerate(algorithms):
        launch = Launch(params, ctx, devices, nproc, sizes, algorithm, attempt, len(algorithms))
        sweep = _nccl_tests_sweep(launch) if use_nccl_tests else _torchrun_sweep(launch)
        suffix = "" if algorithm is None else f"_{algorithm.lower()}"
        ctx.result.add(*judge(sweep, params, suffix))
        ctx.result.evidence[f"run{suffix or '_default'}"] = sweep.evidence


def judge(sweep: Sweep, params: AllReduceParams, suffix: str) -> list[CheckMeasurement]:
    largest = max(sweep.rows, key=lambda row: row.size_bytes)
    table = [[r.size_bytes, *map(significant, (r.time_us, r.algbw_gbps, r.busbw_gbps))] for r in sweep.rows]
    about = {"algorithm": sweep.algorithm, "ranks": sweep.ranks, "size_bytes": largest.size_bytes}
    wrong = [row.wrong for row in sweep.rows if row.wrong is not None]
    out = [
        measurement(
            f"busbw{suffix}",
            largest.busbw_gbps,
            "GB/s",
            params.expected_busbw_gbps,
            evidence={**about, "sweep": table, "columns": ["size_bytes", "time_us", "algbw_gbps", "busbw_gbps"]},
        ),
        measurement(f"algbw{suffix}", largest.algbw_gbps, "GB/s", evidence=about),
    ]
    if wrong:
        out.append(measurement(f"wrong_elements{suffix}", sum(wrong), "count", 0, "at_most", evidence=about))
    return out


def _use_nccl_tests(params: AllReduceParams, ctx: CheckContext, cuda: bool) -> bool:
    if params.implementation == "torch":
        return False
    possible = cuda and params.nnodes == 1 and ctx.which(NCCL_TESTS) is not None
    if params.implementation == "nccl-tests" and not possible:
        raise CheckUnavailable(f"implementation nccl-tests needs {NCCL_TESTS} on PATH, a GPU and a single node")
    return possible


@dataclass(frozen=True)
class Launch:
    """One sweep: the check's parameters, the ranks in this node, and which algorithm (None: NCCL's
    choice) as the ``attempt``-th of ``attempts``."""

    params: AllReduceParams
    ctx: CheckContext
    devices: Devices
    nproc: int
    sizes: list[int]
    algorithm: str | None
    attempt: int
    attempts: int

    @property
    def label(self) -> str:
        backend = "nccl" if self.devices.kind == "cuda" else "gloo"
        return (
            DEFAULT_ALGORITHM[backend] if self.algorithm is None else f"{self.algorithm} (NCCL_ALGO={self.algorithm})"
        )

    def progress(self, done: float) -> None:
        step = f"all-reduce, {self.algorithm or 'default'}"
        self.ctx.reporter.progress((self.attempt + done) / self.attempts, step)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("NCCL_ALGO", None)  # "NCCL's choice" means its choice, not a value left in the environment
        if self.algorithm is not None:
            env["NCCL_ALGO"] = self.algorithm
        env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        if self.devices.kind == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in self.devices.gpus[: self.nproc])
        return env


def _torchrun_sweep(launch: Launch) -> Sweep:
    params = launch.params
    backend = "nccl" if launch.devices.kind == "cuda" else "gloo"
    worker = WorkerParams(backend, launch.sizes, params.iters, params.warmup, params.dtype)
    if params.nnodes == 1:
        rendezvous = ["--standalone"]
    else:
        assert params.rendezvous is not None
        host, _, port = params.rendezvous.rpartition(":")
        rendezvous = ["--nnodes", str(params.nnodes), "--node-rank", str(params.node_rank)]
        rendezvous += ["--master-addr", host.strip("[]"), "--master-port", str(int(port) + launch.attempt)]
    argv = [sys.executable, "-m", "torch.distributed.run", *rendezvous, "--nproc-per-node", str(launch.nproc)]
    argv += ["--max-restarts", "0", "-m", "agents.executors.allreduce_worker", msgspec.json.encode(worker).decode()]
    lines = _WorkerLines(launch.ctx, launch.progress)
    launched = run_tool(argv, timeout_s=params.timeout_s, on_output=lines.feed, env=launch.environment())
    lines.feed("\n")
    report = lines.report
    if report is None:
        raise CheckUnavailable(_failure("torchrun", launched, lines.stray))
    rows = sweep_rows([(r.size_bytes, r.time_us_mean, r.wrong) for r in report.rows], report.world_size)
    evidence = {"versions": report.versions, "slowest_rank_time_us": [round(r.time_us_max, 3) for r in report.rows]}
    return Sweep(launch.label, report.world_size, rows, evidence)


class _WorkerLines:
    """torchrun's stdout, a line at a time: the worker's progress and log lines relayed, its report
    kept, anything else counted."""

    def __init__(self, ctx: CheckContext, progress: Callable[[float], None]) -> None:
        self._ctx, self._progress = ctx, progress
        self._partial = ""
        self.report: WorkerReport | None = None
        self.stray: list[str] = []

    def feed(self, piece: str) -> None:
        *complete, self._partial = (self._partial + piece).split("\n")
        for line in complete:
            self._line(line.strip())

    def _line(self, line: str) -> None:
        if not line:
            return
        if '"allreduce_sweep"' in line:
            try:
                self.report = _worker_lines.decode(line)
                return
            except msgspec.ValidationError:
                pass
        try:
            message = decode_check_line(line)
        except ProtocolError:
            self.stray = [*self.stray[-9:], line[:300]]
            return
        if isinstance(message, CheckProgress):
            self._progress(message.fraction)
        elif isinstance(message, CheckLog):
            self._ctx.reporter.log(message.level, message.message)


def _nccl_tests_sweep(launch: Launch) -> Sweep:
    params, sizes = launch.params, sorted(launch.sizes)
    binary = launch.ctx.which(NCCL_TESTS)
    assert binary is not None
    ratios = {b // a for a, b in itertools.pairwise(sizes) if b > a and b % a == 0}
    factor = ratios.pop() if len(ratios) == 1 else 2  # its sweep is geometric: -b low -e high -f factor
    argv = [binary, "-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", str(factor), "-g", str(launch.nproc)]
    argv += ["-n", str(params.iters), "-w", str(params.warmup), "-c", "1", "-d", NCCL_TESTS_DTYPES[params.dtype]]
    launch.progress(0.0)
    ran = run_tool(argv, timeout_s=params.timeout_s, env=launch.environment())
    try:
        parsed = nccl_tests.parse(ran.stdout)
    except nccl_tests.NcclTestsOutputError as error:
        raise CheckUnavailable(_failure(NCCL_TESTS, ran, [str(error)])) from None
    counted = parsed.check_column == "#wrong"
    rows = [
        SweepRow(row.size_bytes, half.time_us, half.algbw_gbps, half.busbw_gbps,
                 int(half.wrong) if counted and half.wrong is not None else None)
        for row in parsed.rows
        if (half := row.out_of_place) is not None
    ]  # fmt: skip
    launch.progress(1.0)
    evidence = {"nccl_tests_version": parsed.version, "avg_busbw_gbps": parsed.avg_busbw_gbps}
    return Sweep(launch.label + ", out-of-place", launch.nproc, rows, evidence)


def _failure(what: str, ran: ToolRun, stray: list[str]) -> str:
    """Why a launch gave no figures, in the words that matter: a rank's own error (torchrun prefixes
    its lines with ``[rankN]:``) rather than torchrun's summary of it."""
    how = f"timed out after {ran.seconds:.0f} s" if ran.timed_out else f"exited {ran.returncode}"
    lines = ran.stderr_tail.splitlines()
    ranks = [line for line in lines if line.startswith("[rank")]
    tail = (ranks or lines or stray)[-4:]
    return f"{what} {how} without a result: " + " | ".join(line.strip() for line in tail)[:1500]
