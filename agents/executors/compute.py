"""GPU compute: sustained matrix multiplies in each dtype for a set time, on every GPU at once.

Each matmul of M×K by K×N is 2·M·N·K floating-point operations (a multiply and an add per term);
TFLOP/s = operations ÷ seconds ÷ 10¹². The run is cut into windows of about ``window_s``; each
window gives one TFLOP/s sample per GPU, timed with CUDA events around the matmuls queued in it (on
the CPU, with the wall clock). What is judged, per GPU and dtype:

- ``tflops_<dtype>``: the whole run's operations over its time, against ``min_tflops``;
- ``tflops_drop_<dtype>``: 1 − (mean of the last quarter of the windows ÷ mean of the first
  quarter), against ``max_drop``: a GPU that starts fast and throttles as it heats fails even when
  its mean looks fine;
- ``mismatches_<dtype>``: windows whose last product differs from the first one computed from the
  same inputs (beyond a tolerance), as gpu-burn compares: a GPU that computes wrong fails;
- from the node's collector during the whole check: each GPU's highest temperature and power, and
  the samples it spent in thermal, hardware-slowdown or power-brake throttling.

GPUs run concurrently, so the node heats and draws power as it does in training. TF32 is fp32
inputs with the tensor cores' TF32 mode on; fp32 turns it off. The CPU runs fp32 and bf16 (its
fp16 is emulated, and TF32 does not exist there).
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from agents.executors.context import CheckContext
from agents.executors.params import ComputeParams, Dtype
from agents.executors.results import measurement, significant
from agents.executors.runtime import CheckUnavailable, Devices, Stopwatch, require_torch, select_devices
from agents.executors.telemetry import TelemetryWatch
from agents.protocol import CheckMeasurement

GPU_DTYPES: Final[tuple[Dtype, ...]] = ("bf16", "fp16", "tf32", "fp32")
CPU_DTYPES: Final[tuple[Dtype, ...]] = ("fp32", "bf16")
DEFAULT_SIZE: Final = {"cuda": 8192, "cpu": 1024}
WARMUP_MATMULS: Final = 3
MIN_WINDOWS: Final = 2  # a drop needs a first and a last
MAX_SAMPLES_SHOWN: Final = 200  # per-window samples in the evidence; a longer run shows every k-th
# Largest difference from the reference product that is still the same answer, relative to the
# product's largest element: room for a reduction order that changes, none for a flipped bit that matters.
TOLERANCE: Final[dict[Dtype, float]] = {"bf16": 2e-2, "fp16": 4e-3, "tf32": 4e-3, "fp32": 1e-5, "fp64": 1e-12}
TORCH_DTYPES: Final[dict[Dtype, str]] = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "tf32": "float32",
    "fp32": "float32",
    "fp64": "float64",
}


@dataclass
class Lane:
    """One device's operands and its windows' timings."""

    gpu: int | None
    a: Any
    b: Any
    c: Any
    reference: Any
    scale: float = 1.0  # the reference's largest magnitude: errors are relative to it
    per_window: int = 0  # matmuls
    windows: list[float] = field(default_factory=list)  # seconds each
    mismatches: int = 0  # windows whose product was wrong
    worst_error: float = 0.0  # relative to the reference's largest element
    non_finite: int = 0  # windows whose product held a NaN or infinity


def run(params: ComputeParams, ctx: CheckContext) -> None:
    torch = require_torch()
    devices = select_devices(torch, params.device, params.gpus)
    ctx.result.ran_on(devices.kind, devices.name, devices.tool)
    dtypes, unsupported = _dtypes(params.dtypes, devices)
    size = params.size or DEFAULT_SIZE[devices.kind]
    ctx.result.evidence.update(
        size=size, flops_per_matmul=2 * size**3, window_s=params.window_s, duration_s_per_dtype=params.duration_s
    )
    if unsupported:
        ctx.result.evidence["dtypes_not_run"] = {dtype: "not supported on the CPU" for dtype in unsupported}
    if not dtypes:
        raise CheckUnavailable(f"none of the dtypes {unsupported} runs on the CPU")
    watch = TelemetryWatch(ctx.open_collector() if devices.kind == "cuda" else None, params.sample_interval_s)
    watch.start()
    try:
        for number, dtype in enumerate(dtypes):

            def progress(done: float, dtype: Dtype = dtype, number: int = number) -> None:
                ctx.reporter.progress((number + done) / len(dtypes), f"{dtype} on {devices.name}")

            lanes = sustain(torch, devices, dtype, size, params.duration_s, params.window_s, progress)
            ctx.result.add(*judge(lanes, dtype, size, params))
    finally:
        watch.stop()
    ctx.result.add(
        *watch.measurements(devices.gpus, max_temp_c=params.max_temp_c, fail_on_throttle=params.fail_on_throttle)
    )


def _dtypes(requested: list[Dtype] | None, devices: Devices) -> tuple[list[Dtype], list[Dtype]]:
    if devices.kind == "cuda":
        return list(requested or GPU_DTYPES), []
    wanted = list(requested or CPU_DTYPES)
    return [d for d in wanted if d != "tf32"], [d for d in wanted if d == "tf32"]


def sustain(
    torch: ModuleType,
    devices: Devices,
    dtype: Dtype,
    size: int,
    duration_s: float,
    window_s: float,
    progress: Callable[[float], None] = lambda done: None,
) -> list[Lane]:
    """Matmuls of ``size``³ in ``dtype`` on every lane for ``duration_s``, in windows of ``window_s``."""
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    kind = getattr(torch, TORCH_DTYPES[dtype])
    lanes = [_lane(torch, devices.torch_device(torch, gpu), gpu, kind, size) for gpu in devices.lanes]
    per_window = _matmuls_per_window(torch, lanes[0], window_s)
    for lane in lanes:
        lane.per_window = per_window
    pending: list[tuple[list[Stopwatch], list[Any]]] = []
    began = time.monotonic()
    window = 0
    # By the clock, not a count of windows: a device slower than its calibration said (a shared CPU,
    # a GPU that throttles) still stops on time. The host runs at most a window ahead of the GPUs.
    while window < MIN_WINDOWS or time.monotonic() - began < duration_s:
        watches = [Stopwatch(torch, lane.gpu) for lane in lanes]
        for watch in watches:
            watch.start()
        for _ in range(per_window):
            for lane in lanes:  # interleaved, so every GPU's queue fills at once
                torch.matmul(lane.a, lane.b, out=lane.c)
        for watch in watches:
            watch.stop()
        errors = [(lane.c - lane.reference).abs().max() for lane in lanes]  # queued, read a window later
        pending.append((watches, errors))
        if len(pending) > 1:  # the host waits on the window before last: the GPUs never run dry
            _settle(lanes, *pending.pop(0), dtype)
        window += 1
        progress(min(1.0, (time.monotonic() - began) / duration_s))
    for entry in pending:
        _settle(lanes, *entry, dtype)
    return lanes


def _lane(torch: ModuleType, device: Any, gpu: int | None, kind: Any, size: int) -> Lane:
    generator = torch.Generator(device=device).manual_seed(1234 + (gpu or 0))
    a = torch.randn(size, size, device=device, generator=generator).to(kind)
    b = torch.randn(size, size, device=device, generator=generator).to(kind)
    c = torch.empty(size, size, device=device, dtype=kind)
    for _ in range(WARMUP_MATMULS):
        torch.matmul(a, b, out=c)
    reference = c.clone()
    scale = max(float(reference.abs().max()), 1e-30)
    return Lane(gpu, a, b, c, reference, scale)


def _matmuls_per_window(torch: ModuleType, lane: Lane, window_s: float) -> int:
    """How many matmuls fill a window, from timing a few on the first lane."""
    watch = Stopwatch(torch, lane.gpu)
    count = WARMUP_MATMULS
    watch.start()
    for _ in range(count):
        torch.matmul(lane.a, lane.b, out=lane.c)
    watch.stop()
    return max(1, round(window_s / max(watch.seconds() / count, 1e-9)))


def _settle(lanes: list[Lane], watches: list[Stopwatch], errors: list[Any], dtype: Dtype) -> None:
    for lane, watch, error in zip(lanes, watches, errors, strict=True):
        lane.windows.append(watch.seconds())
        worst = float(error) / lane.scale
        if not math.isfinite(worst):
            lane.non_finite += 1
            lane.mismatches += 1
            continue
        lane.worst_error = max(lane.worst_error, worst)
        lane.mismatches += worst > TOLERANCE[dtype]


def judge(lanes: list[Lane], dtype: Dtype, size: int, params: ComputeParams) -> list[CheckMeasurement]:
    flops = 2 * size**3
    expected = (params.min_tflops or {}).get(dtype)
    out = []
    for lane in lanes:
        samples = [lane.per_window * flops / seconds / 1e12 for seconds in lane.windows]
        total = len(lane.windows) * lane.per_window * flops / sum(lane.windows) / 1e12
        quarter = max(1, len(samples) // 4)
        first, last = sum(samples[:quarter]) / quarter, sum(samples[-quarter:]) / quarter
        every = math.ceil(len(samples) / MAX_SAMPLES_SHOWN)
        evidence = {
            "windows": len(samples),
            "matmuls_per_window": lane.per_window,
            "seconds": round(sum(lane.windows), 9),
            "samples": [significant(sample) for sample in samples[::every]],
            "samples_every": every,
            "min": significant(min(samples)),
            "max": significant(max(samples)),
        }
        out += [
            measurement(f"tflops_{dtype}", total, "TFLOP/s", expected, gpu=lane.gpu, evidence=evidence),
            measurement(
                f"tflops_drop_{dtype}",
                1 - last / max(first, 1e-30),
                "ratio",
                params.max_drop,
                "at_most",
                gpu=lane.gpu,
                evidence={"first_quarter_tflops": significant(first), "last_quarter_tflops": significant(last)},
            ),
            measurement(
                f"mismatches_{dtype}",
                lane.mismatches,
                "count",
                0,
                "at_most",
                gpu=lane.gpu,
                evidence={
                    "worst_relative_error": lane.worst_error,
                    "tolerance": TOLERANCE[dtype],
                    "non_finite_windows": lane.non_finite,
                },
            ),
        ]
    return out
