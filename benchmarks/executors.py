"""executors: the compute check's TFLOP/s over a bare ``torch.matmul`` loop of the same shapes, on
the same device, in the same run.

The check (``agents.executors`` "compute", run in this process exactly as its subprocess runs it:
windows timed per device, the product compared with its reference every window, the lines it
writes validated) and a bare loop (``torch.matmul(a, b, out=c)`` for the same time, then one
synchronise) run in rounds of bare, check, check, bare, so that a machine whose load changes
during a round (a shared CPU) weighs on both alike; a round's ratio is its two check figures over
its two bare ones, and the ratio reported is the median of ``--rounds`` rounds, with their range.
On a machine without a GPU both run on the CPU, and the output says so.

    python benchmarks/executors.py                    # the CPU here: fp32 and bf16, 1024³
    python benchmarks/executors.py --size 8192        # on a GPU node: bf16, fp16, tf32, fp32

Target: every dtype's ratio within 0.95..1.05 (the check's figure is the bare loop's within 5 %:
it neither costs more than that nor reports more than the device does). The last line printed is
JSON.
"""

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.executors.__main__ import run as run_check
from agents.executors.compute import CPU_DTYPES, DEFAULT_SIZE, GPU_DTYPES, TORCH_DTYPES
from agents.executors.reporter import Reporter
from agents.executors.runtime import require_torch, select_devices, synchronize

TOLERANCE = 0.05  # the ratio's allowed distance from 1
WINDOWS = 5  # the check's windows in a run, so that it runs as long as the bare loop does


def bare_tflops(torch: Any, device: Any, gpu: int | None, dtype: str, size: int, seconds: float) -> float:
    """TFLOP/s of matmuls queued back to back for ``seconds``, with nothing else going on."""
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    kind = getattr(torch, TORCH_DTYPES[dtype])
    a = torch.randn(size, size, device=device).to(kind)
    b = torch.randn(size, size, device=device).to(kind)
    c = torch.empty(size, size, device=device, dtype=kind)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    synchronize(torch, gpu)
    count, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        for _ in range(8):
            torch.matmul(a, b, out=c)
        count += 8
    synchronize(torch, gpu)
    return count * 2 * size**3 / (time.perf_counter() - began) / 1e12


def check_tflops(dtype: str, size: int, seconds: float, gpu: int | None) -> float:
    """The compute check's own figure (the first GPU's, on a GPU node)."""
    params = {"duration_s": seconds, "window_s": seconds / WINDOWS, "dtypes": [dtype], "size": size, "max_drop": 1.0}
    if gpu is not None:
        params["gpus"] = [gpu]
    result, _ = run_check("compute", json.dumps(params), Reporter("compute", io.BytesIO()))
    if result.error:
        raise SystemExit(f"the compute check failed: {result.error}")
    (tflops,) = [m for m in result.measurements if m.name == f"tflops_{dtype}"]
    return tflops.measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, help="M = N = K (default 1024 on the CPU, 8192 on a GPU)")
    parser.add_argument("--seconds", type=float, default=0.5, help="each run (default 0.5)")
    parser.add_argument("--rounds", type=int, default=21, help="rounds of bare, check, check, bare (default 21)")
    parser.add_argument("--dtypes", nargs="+", help="default: fp32 bf16 on the CPU, bf16 fp16 tf32 fp32 on a GPU")
    args = parser.parse_args()
    torch = require_torch()
    devices = select_devices(torch, "auto", None)
    gpu = devices.gpus[0] if devices.gpus else None
    device = devices.torch_device(torch, gpu)
    size = args.size or DEFAULT_SIZE[devices.kind]
    dtypes = args.dtypes or list(GPU_DTYPES if devices.kind == "cuda" else CPU_DTYPES)
    label = "GPU" if gpu is not None else "CPU"
    print(f"{label}: {devices.name}; {size}³ matmuls, {args.seconds} s a run, {args.rounds} rounds (median ratio)")
    figures: dict[str, dict[str, float]] = {}
    for dtype in dtypes:
        bare, checked, ratios = [], [], []
        for _ in range(args.rounds):
            first = bare_tflops(torch, device, gpu, dtype, size, args.seconds)
            pair = [check_tflops(dtype, size, args.seconds, gpu) for _ in range(2)]
            last = bare_tflops(torch, device, gpu, dtype, size, args.seconds)
            bare += [first, last]
            checked += pair
            ratios.append(sum(pair) / (first + last))
        row = {
            "check_tflops": round(statistics.median(checked), 4),
            "bare_tflops": round(statistics.median(bare), 4),
            "ratio": round(statistics.median(ratios), 4),
            "ratio_min": round(min(ratios), 4),
            "ratio_max": round(max(ratios), 4),
        }
        figures[dtype] = row
        print(
            f"  {dtype}: check {row['check_tflops']} TFLOP/s, bare loop {row['bare_tflops']}: "
            f"ratio {row['ratio']} (rounds {row['ratio_min']}..{row['ratio_max']})"
        )
    worst = max((row["ratio"] for row in figures.values()), key=lambda ratio: abs(ratio - 1))
    met = abs(worst - 1) <= TOLERANCE
    print(f"furthest from 1: {worst} (target 1 ± {TOLERANCE}, on the {label}: {'met' if met else 'MISSED'})")
    summary = {
        "benchmark": "executors",
        "device": devices.kind,
        "device_name": devices.name,
        "size": size,
        "seconds_per_run": args.seconds,
        "rounds": args.rounds,
        "dtypes": figures,
        "worst_ratio": worst,
        "target": f"ratio within {1 - TOLERANCE:.2f}..{1 + TOLERANCE:.2f}",
        "met": met,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
