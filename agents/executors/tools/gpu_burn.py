"""gpu-burn (github.com/wilicc/gpu-burn): its output, parsed for each GPU's verdict.

gpu-burn exits 0 even when a GPU computed wrong: the verdict is only in its last lines,

    Tested 8 GPUs:
        GPU 0: OK
        GPU 1: FAULTY

which name GPUs by their place among those tested: with ``-i 3`` the one GPU tested is "GPU 0"
there (``parse`` takes the real indices). While it runs it rewrites one progress line with ``\\r``::

    45.2%  proc'd: 1672 (51230 Gflop/s) - 1671 (51008 Gflop/s)   errors: 0 - 3 (WARNING!)   temps: 61 C - 63 C

``errors`` count wrong results since its last summary (it resets them every ~10 %), ``(DIED!)``
marks a worker that exited (its ``proc'd`` count is -1), and ``--`` a temperature it could not read.
Without the summary (gpu-burn killed, or "No clients are alive! Aborting") the verdicts come from
the progress lines, and the run is marked incomplete.
"""

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from agents.executors import compute
from agents.executors.context import CheckContext
from agents.executors.params import ComputeParams, GpuBurnParams
from agents.executors.results import measurement
from agents.executors.runtime import CheckUnavailable, gpus_label, require_torch
from agents.executors.telemetry import TelemetryWatch
from agents.executors.tools.process import run_tool

_TESTED: Final = re.compile(r"^Tested (\d+) GPUs?:")
_VERDICT: Final = re.compile(r"^GPU (\d+): (OK|FAULTY)\b")
_PERCENT: Final = re.compile(r"^(\d+(?:\.\d+)?)%")
_PROCESSED: Final = re.compile(r"(-?\d+) \((\d+(?:\.\d+)?) Gflop/s\)")
_ERRORS: Final = re.compile(r"(-?\d+)\s*(\((?:WARNING|DIED)!\))?")
_TEMP: Final = re.compile(r"(\d+) C|--")


@dataclass
class GpuBurnGpu:
    index: int
    faulty: bool = False
    died: bool = False
    errors: int = 0  # the most it reported between two summaries
    gflops: float | None = None  # from the last progress line
    temp_c: int | None = None


@dataclass
class GpuBurnRun:
    gpus: dict[int, GpuBurnGpu] = field(default_factory=dict)
    complete: bool = False  # the "Tested N GPUs" summary was there, with a verdict for each
    percent: float | None = None  # the last progress figure
    aborted: bool = False  # "No clients are alive!"

    @property
    def faulty(self) -> list[int]:
        return sorted(index for index, gpu in self.gpus.items() if gpu.faulty or gpu.died)


def parse(text: str, gpu_indices: list[int] | None = None) -> GpuBurnRun:
    """``gpu_indices``: the node's index of each GPU in the order gpu-burn tested them (default
    0, 1, ...)."""
    run = GpuBurnRun()
    tested: int | None = None
    verdicts: dict[int, bool] = {}

    def gpu(position: int) -> GpuBurnGpu:
        index = gpu_indices[position] if gpu_indices and position < len(gpu_indices) else position
        return run.gpus.setdefault(index, GpuBurnGpu(index))

    for piece in re.split(r"[\r\n]+", text):
        line = piece.strip()
        if "proc'd:" in line:
            _progress(line, run, gpu)
        elif (summary := _TESTED.match(line)) is not None:
            tested = int(summary[1])
        elif (verdict := _VERDICT.match(line)) is not None and tested is not None:
            verdicts[int(verdict[1])] = verdict[2] == "FAULTY"
        elif "No clients are alive" in line:
            run.aborted = True
    for position, faulty in verdicts.items():
        gpu(position).faulty = faulty
    run.complete = tested is not None and len(verdicts) == tested
    if not run.complete:  # no summary to trust: what the progress lines showed is all there is
        for each in run.gpus.values():
            each.faulty = each.faulty or each.errors > 0 or each.died
    return run


def _progress(line: str, run: GpuBurnRun, gpu: Callable[[int], GpuBurnGpu]) -> None:
    percent = _PERCENT.match(line)
    if percent is not None:
        run.percent = float(percent[1])
    processed, _, rest = line.partition("proc'd:")[2].partition("errors:")
    errors, _, temps = rest.partition("temps:")
    for position, (count, gflops) in enumerate(_PROCESSED.findall(processed)):
        gpu(position).gflops = float(gflops)
        if int(count) == -1:
            gpu(position).died = True
    for position, part in enumerate(errors.split(" - ")):
        match = _ERRORS.search(part)
        if match is None:
            continue
        each = gpu(position)
        each.errors = max(each.errors, int(match[1]))
        each.died = each.died or match[2] == "(DIED!)"
    for position, part in enumerate(temps.split(" - ")):
        match = _TEMP.search(part)
        if match is not None:
            gpu(position).temp_c = int(match[1]) if match[1] else None


# The check -------------------------------------------------------------------------------------

STARTUP_AND_SHUTDOWN_S: Final = 180.0  # allocating memory, then its SIGTERM-then-SIGKILL of workers
BINARIES: Final = ("gpu-burn", "gpu_burn")


def run_check(params: GpuBurnParams, ctx: CheckContext) -> None:
    binary = next((found for name in BINARIES if (found := ctx.which(name)) is not None), None)
    if binary is None:
        _built_in(params, ctx)
        return
    gpus = ctx.gpus()
    tested = params.gpus if params.gpus else [gpu.index for gpu in gpus]
    if params.gpus and len(params.gpus) > 1 and len(params.gpus) < len(gpus):
        raise CheckUnavailable("gpu-burn tests one GPU (-i N) or all of them; give one GPU, or none for all")
    ctx.result.ran_on("cuda", gpus_label([gpu.name for gpu in gpus if gpu.index in tested]), "gpu-burn")
    argv = [binary, *(["-d"] if params.doubles else []), *(["-tc"] if params.tensor_cores else [])]
    argv += ["-m", f"{params.memory_percent}%"]
    if params.gpus and len(params.gpus) == 1:
        argv += ["-i", str(params.gpus[0])]
    if params.compare_file:
        argv += ["-c", params.compare_file]
    argv.append(str(round(params.duration_s)))
    ctx.result.evidence["command"] = " ".join(argv[1:])

    def progress(piece: str) -> None:
        figures = [float(m[1]) for part in piece.split("\r") if (m := _PERCENT.match(part.strip()))]
        if figures:
            ctx.reporter.progress(figures[-1] / 100, "gpu-burn")

    watch = TelemetryWatch(ctx.open_collector()).start()
    try:
        # gpu-burn reads its compare kernel (compare.ptx) from the working directory by default:
        # where a build from source leaves it, next to the binary.
        cwd = None if params.compare_file else os.path.dirname(os.path.realpath(binary))
        ran = run_tool(argv, timeout_s=params.duration_s + STARTUP_AND_SHUTDOWN_S, on_output=progress, cwd=cwd)
    finally:
        watch.stop()
    parsed = parse(ran.stdout, tested if params.gpus else None)
    ctx.result.evidence.update(exit_code=ran.returncode, complete=parsed.complete, aborted=parsed.aborted)
    for index, gpu in sorted(parsed.gpus.items()):
        seen = {
            "errors": gpu.errors,
            "died": gpu.died,
            "temp_c": gpu.temp_c,
            "verdict": "FAULTY" if gpu.faulty else "OK",
        }
        ctx.result.add(measurement("faulty", gpu.faulty or gpu.died, "count", 0, "at_most", gpu=index, evidence=seen))
        if gpu.gflops is not None:
            ctx.result.add(measurement("tflops", gpu.gflops / 1000, "TFLOP/s", params.min_tflops, gpu=index))
    ctx.result.add(*watch.measurements(tuple(tested), max_temp_c=None, fail_on_throttle=True))
    if not parsed.complete:
        why = "timed out" if ran.timed_out else f"exited {ran.returncode}"
        raise CheckUnavailable(f"gpu-burn {why} without its per-GPU summary: {ran.stderr_tail[-800:]}")


def _built_in(params: GpuBurnParams, ctx: CheckContext) -> None:
    """No gpu-burn: the built-in compute stress, in the dtype gpu-burn would have used, judged alike
    (its product compared every window, as gpu-burn compares)."""
    on_gpu = require_torch().cuda.is_available()  # TF32 is a tensor-core mode: the CPU has none
    dtype = "fp64" if params.doubles else "tf32" if params.tensor_cores and on_gpu else "fp32"
    ctx.result.evidence["instead_of_gpu_burn"] = "gpu-burn is not on PATH: the built-in compute stress ran"
    stress = ComputeParams(
        duration_s=params.duration_s,
        dtypes=[dtype],
        gpus=params.gpus,
        min_tflops={dtype: params.min_tflops} if params.min_tflops else None,
    )
    compute.run(stress, ctx)
