"""Memory bandwidth and PCIe host↔device bandwidth, per GPU.

**Memory** (``memory_bandwidth``): a large buffer copied device-to-device on one GPU, ``repeats``
times. GB/s = 2 × bytes × repeats ÷ seconds ÷ 10⁹: a copy reads every byte once and writes it
once, and both cross the memory bus, which is how CUDA's bandwidthTest and STREAM's Copy count it
(so the figure compares with the HBM's datasheet number; an H100's 3.35 TB/s HBM3 copies at about
2.6-3.0 TB/s counted this way).

**PCIe** (``pcie``): a buffer in pinned (page-locked) host memory copied to the GPU (``h2d``) and
back (``d2h``), one direction at a time, one GPU at a time. GB/s = bytes × repeats ÷ seconds ÷ 10⁹,
each byte counted once, as bandwidthTest does; Gen5 x16 gives about 52-56 GB/s each way, Gen4 x16
about 25. The link's generation and width, as NVML reports them now, are in the evidence: a
figure of half the siblings' with "width 8 of 16" is a slot, riser or cable, not a GPU.

On the CPU the same code copies host memory to host memory and says so: its figures are DRAM's.
"""

from types import ModuleType
from typing import Any, Final

from agents.executors.context import CheckContext
from agents.executors.params import MIB, MemoryBandwidthParams, PcieParams
from agents.executors.results import measurement
from agents.executors.runtime import Stopwatch, require_torch, select_devices, synchronize

DEFAULT_MEMORY_BYTES: Final = {"cuda": 1024 * MIB, "cpu": 256 * MIB}
WARMUP_COPIES: Final = 2


def run_memory(params: MemoryBandwidthParams, ctx: CheckContext) -> None:
    torch = require_torch()
    devices = select_devices(torch, params.device, params.gpus)
    ctx.result.ran_on(devices.kind, devices.name, devices.tool)
    size = params.size_bytes or DEFAULT_MEMORY_BYTES[devices.kind]
    ctx.result.evidence.update(
        size_bytes=size,
        repeats=params.repeats,
        convention="2 × bytes per copy (read + write), as CUDA bandwidthTest and STREAM Copy count",
        memory="HBM (device-to-device copy)" if devices.kind == "cuda" else "host DRAM (no GPU)",
    )
    for number, gpu in enumerate(devices.lanes):
        ctx.reporter.progress(number / len(devices.lanes), f"copy on {_lane_name(gpu)}")
        device = devices.torch_device(torch, gpu)
        source = torch.ones(size, dtype=torch.uint8, device=device)
        target = torch.empty_like(source)
        seconds = timed_copies(torch, target, source, params.repeats, gpu)
        rate = 2 * size * params.repeats / seconds / 1e9
        evidence = {"seconds": round(seconds, 9)}
        ctx.result.add(measurement("copy", rate, "GB/s", params.min_gbps, gpu=gpu, evidence=evidence))
        del source, target


def run_pcie(params: PcieParams, ctx: CheckContext) -> None:
    torch = require_torch()
    devices = select_devices(torch, params.device, params.gpus)
    ctx.result.ran_on(devices.kind, devices.name, devices.tool)
    cuda = devices.kind == "cuda"
    ctx.result.evidence.update(
        size_bytes=params.size_bytes,
        repeats=params.repeats,
        convention="bytes per copy counted once, one direction at a time, as CUDA bandwidthTest counts",
        host_memory="pinned" if cuda else "pageable (no GPU: host memory to host memory, not PCIe)",
    )
    links = _pcie_links(ctx) if cuda else {}
    host = torch.ones(params.size_bytes, dtype=torch.uint8, pin_memory=cuda)
    for number, gpu in enumerate(devices.lanes):
        ctx.reporter.progress(number / len(devices.lanes), f"host↔{_lane_name(gpu)}")
        device_buffer = torch.empty_like(host, device=devices.torch_device(torch, gpu))
        link = links.get(gpu, {}) if gpu is not None else {}
        for name, target, source, limit in (
            ("h2d", device_buffer, host, params.min_h2d_gbps),
            ("d2h", host, device_buffer, params.min_d2h_gbps),
        ):
            seconds = timed_copies(torch, target, source, params.repeats, gpu)
            rate = params.size_bytes * params.repeats / seconds / 1e9
            evidence = {"seconds": round(seconds, 9), **link}
            ctx.result.add(measurement(name, rate, "GB/s", limit, gpu=gpu, evidence=evidence))
        del device_buffer


def timed_copies(torch: ModuleType, target: Any, source: Any, repeats: int, gpu: int | None) -> float:
    """Seconds that ``repeats`` copies of ``source`` into ``target`` take, after a warm-up."""
    for _ in range(WARMUP_COPIES):
        target.copy_(source, non_blocking=True)
    synchronize(torch, gpu)
    watch = Stopwatch(torch, gpu)
    watch.start()
    for _ in range(repeats):
        target.copy_(source, non_blocking=True)
    watch.stop()
    return watch.seconds()


def _pcie_links(ctx: CheckContext) -> dict[int, dict[str, int]]:
    """Each GPU's PCIe generation and width (what it can reach, and the width it trained at)."""
    gpus = ctx.gpus()
    facts = ("pcie_gen", "pcie_width", "pcie_width_current")
    return {gpu.index: {f: getattr(gpu, f) for f in facts if getattr(gpu, f) is not None} for gpu in gpus}


def _lane_name(gpu: int | None) -> str:
    return "the CPU" if gpu is None else f"GPU {gpu}"
