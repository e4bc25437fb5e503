"""Burn-in check results of a simulated node, computed from its model: what the real executors
(``agents.executors``) would measure on a node of its profile with its faults, in-process and in
about a millisecond, so that a thousand simulated nodes can burn in inside one process.

Every result says ``device: simulated`` and ``tool: simulator``. The figures start from what a
healthy GPU of the profile measures (``FIGURES``: published results of the same tests, not the
datasheet's peaks), vary a little from GPU to GPU as silicon does, and follow the node's state:

- compute runs a copy of the node's model under a burn-in load for the check's duration: each
  GPU's TFLOP/s follows its SM clock, so a straggler (90 % clock) shows 10 % low, a GPU whose
  cooling failed heats, throttles, drops over the run and shows its thermal throttle reasons, and a
  GPU with an uncorrectable ECC error computes wrong;
- PCIe follows the width the link trained at (the ``x8`` fault halves it), NVLink the links still
  up (an XID 74 takes one down), the all-reduce the slowest GPU's links and, across nodes, the
  InfiniBand ports that are up;
- health reads the model's counters, flags and XID history without advancing it (an ECC fault,
  pending or failed row remapping, a GPU fallen off the bus, a flapping link: each fails);
- a GPU that fell off the bus is missing from every check, as it would be;
- the standard tools are not installed on a simulated node: ``dcgm_diag`` is skipped, and
  ``gpu_burn`` runs the built-in compute stress, as on a real node without gpu-burn.

``simulate_check`` returns at once; ``finished`` is when a real run would have ended
(``nominal_duration_s``), and when to deliver the result is the caller's choice.
"""

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from agents.executors import compute, health, nvlink
from agents.executors.allreduce import DEFAULT_ALGORITHM, DEFAULT_SIZES, Sweep, sweep_rows
from agents.executors.allreduce import judge as judge_allreduce
from agents.executors.checks import CHECKS
from agents.executors.params import (
    AllReduceParams,
    ComputeParams,
    DcgmDiagParams,
    Dtype,
    GpuBurnParams,
    HealthParams,
    MemoryBandwidthParams,
    NvlinkParams,
    Params,
    ParamsError,
    PcieParams,
    StorageParams,
    decode_params,
)
from agents.executors.results import ResultBuilder, measurement
from agents.executors.runtime import CheckSkipped, CheckUnavailable, gpus_label
from agents.executors.telemetry import TelemetryWatch
from agents.protocol import CheckResult, GpuSample, NodeSample, PortSample
from agents.simulator.collector import SimulatedCollector
from agents.simulator.hardware import SimGpu
from agents.simulator.model import NodeModel
from agents.simulator.profiles import Profile
from agents.simulator.workloads import BurnIn

TOOL: Final = "simulator"
MAX_WINDOWS: Final = 8  # per dtype: enough to show a drop (two windows a quarter), cheap for a thousand nodes
SIZE: Final = 8192
LATENCY_US: Final = {"node": 25.0, "fabric": 45.0}  # an all-reduce's fixed cost, in the node and across
RING_SHARE: Final = 0.92  # of a GPU's NIC, what a ring all-reduce across nodes reaches
TREE_SHARE: Final = 1.15  # NCCL's own choice across nodes (a tree, NVLS) can beat the NIC alone


@dataclass(frozen=True)
class BurnInFigures:
    """What a healthy GPU of a profile measures in these checks."""

    tflops: Mapping[Dtype, float]  # sustained dense matmuls at the power cap
    copy_gbps: float  # HBM, read + write counted
    h2d_gbps: float
    d2h_gbps: float
    p2p_gbps: float  # one direction, one pair
    busbw_gbps: float  # an all-reduce over the node's eight GPUs, large messages
    storage_write_gbps: float
    storage_read_gbps: float


def _figures(tflops: tuple[float, float, float, float, float], *rates: float) -> BurnInFigures:
    return BurnInFigures(dict(zip(("bf16", "fp16", "tf32", "fp32", "fp64"), tflops, strict=True)), *rates)


# TFLOP/s (bf16, fp16, tf32, fp32, fp64); then GB/s: HBM copy, h2d, d2h, P2P, all-reduce busbw, storage write, read.
FIGURES: Final[dict[str, BurnInFigures]] = {
    "h100": _figures((760, 770, 380, 51, 55), 2900, 55, 53, 380, 480, 6, 12),
    "h200": _figures((790, 800, 395, 52, 56), 4200, 55, 53, 385, 485, 6, 12),
    "b200": _figures((1750, 1760, 880, 72, 36), 6800, 56, 54, 730, 780, 8, 16),
    "a100": _figures((270, 275, 140, 18.5, 17.5), 1750, 25, 24, 265, 230, 4, 8),
}


@dataclass
class _Node:
    collector: SimulatedCollector
    now: float
    rng: random.Random

    @property
    def model(self) -> NodeModel:
        return self.collector.model

    @property
    def profile(self) -> Profile:
        return self.collector.profile

    @property
    def figures(self) -> BurnInFigures:
        return FIGURES[self.profile.key]

    def present(self, requested: list[int] | None) -> list[SimGpu]:
        """The GPUs a check runs on, as torch would see them: fallen-off ones are not there."""
        gpus = [gpu for gpu in self.model.gpus if gpu.present]
        if requested is None:
            return gpus
        found = {gpu.index: gpu for gpu in gpus}
        missing = [index for index in requested if index not in found]
        if missing:
            raise CheckUnavailable(f"GPUs {missing} are not on this node; it has {sorted(found)}")
        return [found[index] for index in requested]

    def jitter(self) -> float:
        return 1 + self.rng.uniform(-0.005, 0.005)


def silicon(gpu: SimGpu) -> float:
    """How this GPU differs from its siblings in every figure, about ±1 %: the model's own offset."""
    return 1 + gpu.util_offset / 100


def link_share(gpu: SimGpu, profile: Profile) -> float:
    return 1 - len(gpu.inactive_links) / profile.nvlink_links


def simulate_check(
    collector: SimulatedCollector, check: str, params: Mapping[str, Any] | bytes | str | None = None, *, now: float
) -> CheckResult:
    """The result ``check`` would give on this simulated node, started at ``now``."""
    spec = CHECKS.get(check)
    if spec is None:
        raise ValueError(f"Unknown check {check!r}; expected one of {', '.join(sorted(CHECKS))}.")
    builder = ResultBuilder(spec.name, clock=lambda: now)
    names = [collector.profile.name for gpu in collector.model.gpus if gpu.present]
    builder.ran_on("simulated", f"simulated {gpus_label(names)}", TOOL)
    try:
        decoded = decode_params(spec.params, params)
    except ParamsError as error:
        return builder.finish(error=str(error))
    node = _Node(collector, now, random.Random(f"{collector.hostname}:{check}:{now}"))
    builder.clock = lambda: now + nominal_duration_s(check, decoded)
    try:
        SIMULATIONS[check](decoded, node, builder)
    except CheckSkipped as skipped:
        return builder.finish(skipped=str(skipped))
    except CheckUnavailable as error:
        return builder.finish(error=str(error))
    return builder.finish()


def nominal_duration_s(check: str, params: Params) -> float:
    """About how long the real check runs with ``params`` (on a GPU node of this kind)."""
    if isinstance(params, ComputeParams):
        return params.duration_s * len(params.dtypes or compute.GPU_DTYPES) + 5
    if isinstance(params, GpuBurnParams):
        return params.duration_s + 10
    if isinstance(params, AllReduceParams):
        return 20.0 * (2 if params.ring or (params.ring is None and params.nnodes > 1) else 1)
    if isinstance(params, StorageParams):
        return params.size_bytes / 1e9 / 4 + 1
    return {"health": 1.0, "dcgm_diag": 1.0}.get(check, 5.0)


# The checks ------------------------------------------------------------------------------------


def _compute(params: ComputeParams, node: _Node, result: ResultBuilder) -> None:
    gpus = node.present(params.gpus)
    dtypes = list(params.dtypes or compute.GPU_DTYPES)
    windows = max(2, min(MAX_WINDOWS, round(params.duration_s / params.window_s)))
    step_s = params.duration_s / windows
    run = node.model.under(BurnIn())
    reference_mhz = healthy_burn_in_clock(node.profile)
    watch = TelemetryWatch(None)
    result.evidence.update(
        size=SIZE, flops_per_matmul=2 * SIZE**3, window_s=step_s, duration_s_per_dtype=params.duration_s
    )
    flops = 2 * SIZE**3
    for number, dtype in enumerate(dtypes):
        healthy = node.figures.tflops[dtype] * 1e12
        per_window = max(1, round(step_s * healthy / flops))
        lanes = {gpu.index: compute.Lane(gpu.index, None, None, None, None, per_window=per_window) for gpu in gpus}
        for window in range(windows):
            samples, _ = run.sample((number * windows + window + 1) * step_s)
            watch.observe(NodeSample(ts=node.now + (number * windows + window) * step_s, gpus=samples))
            clocks = {sample.index: sample.sm_clock_mhz or 0 for sample in samples}
            for gpu in gpus:
                rate = healthy * silicon(gpu) * node.jitter() * clocks.get(gpu.index, 0) / reference_mhz
                lanes[gpu.index].windows.append(per_window * flops / max(rate, 1.0))
                lanes[gpu.index].mismatches += gpu.ecc_uncorrected_volatile > 0  # a corrupted framebuffer
        result.add(*compute.judge(list(lanes.values()), dtype, SIZE, params))
    indices = tuple(gpu.index for gpu in gpus)
    result.add(*watch.measurements(indices, max_temp_c=params.max_temp_c, fail_on_throttle=params.fail_on_throttle))


@lru_cache(maxsize=16)
def healthy_burn_in_clock(profile: Profile) -> float:
    """The SM clock a healthy GPU of ``profile`` settles at under a burn-in (at its power cap)."""
    model = NodeModel(profile, "reference", 0, BurnIn(), start=0.0)
    for t in range(0, 601, 30):
        samples, _ = model.sample(float(t))
    return sum(sample.sm_clock_mhz or 0 for sample in samples) / len(samples)


def _memory(params: MemoryBandwidthParams, node: _Node, result: ResultBuilder) -> None:
    result.evidence.update(convention="2 × bytes per copy (read + write)", memory="HBM (device-to-device copy)")
    for gpu in node.present(params.gpus):
        rate = node.figures.copy_gbps * silicon(gpu) * node.jitter()
        result.add(measurement("copy", rate, "GB/s", params.min_gbps, gpu=gpu.index))


def _pcie(params: PcieParams, node: _Node, result: ResultBuilder) -> None:
    result.evidence.update(convention="bytes per copy counted once, one direction at a time", host_memory="pinned")
    profile = node.profile
    for gpu in node.present(params.gpus):
        link = {"pcie_gen": profile.pcie_gen, "pcie_width": 16, "pcie_width_current": gpu.pcie_width}
        for name, figure, limit in (
            ("h2d", node.figures.h2d_gbps, params.min_h2d_gbps),
            ("d2h", node.figures.d2h_gbps, params.min_d2h_gbps),
        ):
            rate = figure * gpu.pcie_width / 16 * node.jitter()
            result.add(measurement(name, rate, "GB/s", limit, gpu=gpu.index, evidence=link))


def _nvlink(params: NvlinkParams, node: _Node, result: ResultBuilder) -> None:
    gpus = node.present(params.gpus)
    if len(gpus) < 2:
        raise CheckSkipped(f"peer-to-peer bandwidth needs two GPUs or more; this node has {len(gpus)}")
    found = []
    for i in gpus:
        for j in gpus:
            if i is not j:
                share = min(link_share(i, node.profile), link_share(j, node.profile))
                rate = node.figures.p2p_gbps * share * silicon(i) * node.jitter()
                found.append(
                    measurement(
                        "p2p", rate, "GB/s", params.min_gbps, gpu=i.index, peer=j.index, evidence={"peer_access": True}
                    )
                )
    result.add(*found)
    result.evidence["matrix_gbps"] = nvlink.matrix(found, tuple(gpu.index for gpu in gpus))


def _allreduce(params: AllReduceParams, node: _Node, result: ResultBuilder) -> None:
    gpus = node.present(params.gpus)
    nproc = params.nproc_per_node or len(gpus)
    if nproc > len(gpus):
        raise CheckUnavailable(f"nproc_per_node {nproc} is more than the {len(gpus)} GPUs this node has")
    ranks = nproc * params.nnodes
    in_node = node.figures.busbw_gbps * min(link_share(gpu, node.profile) for gpu in gpus[:nproc])
    up = [port for port in node.model.ports if port.state == "active"]
    nic_gbps = node.profile.ib_rate_gbps / 8 * len(up) / max(1, len(node.model.ports))
    ring = params.ring if params.ring is not None else params.nnodes > 1
    result.evidence.update(backend="nccl", ranks=ranks, nnodes=params.nnodes, nproc_per_node=nproc, dtype=params.dtype)
    for algorithm in [None, "Ring"] if ring else [None]:
        if params.nnodes == 1:
            peak, latency = in_node, LATENCY_US["node"]
        else:
            peak = min(in_node, nic_gbps * (RING_SHARE if algorithm else TREE_SHARE))
            latency = LATENCY_US["fabric"]
        peak *= node.jitter()
        algbw_peak = peak * ranks / (2 * (ranks - 1)) if ranks > 1 else peak
        sizes = params.sizes_bytes or DEFAULT_SIZES["cuda"]
        rows = sweep_rows([(size, latency + size / algbw_peak / 1e3, 0) for size in sizes], ranks)
        label = DEFAULT_ALGORITHM["nccl"] if algorithm is None else f"{algorithm} (NCCL_ALGO={algorithm})"
        suffix = "" if algorithm is None else f"_{algorithm.lower()}"
        result.add(*judge_allreduce(Sweep(label, ranks, rows, {}), params, suffix))


def health_snapshot(model: NodeModel, now: float) -> NodeSample:
    """The node's counters and flags as they are, without advancing its model."""
    gpus = [
        GpuSample(
            index=gpu.index, **{name: getattr(gpu, name) for name in health.GPU_HEALTH_FIELDS if hasattr(gpu, name)}
        )
        for gpu in model.gpus
        if gpu.present
    ]
    ports = [
        PortSample(device=p.device, port=1, state=p.state, symbol_errors=p.symbol_errors, link_downed=p.link_downed,
                   rcv_errors=p.rcv_errors)
        for p in model.ports
    ]  # fmt: skip
    return NodeSample(ts=now, gpus=gpus, ports=ports)


def _health(params: HealthParams, node: _Node, result: ResultBuilder) -> None:
    now = health_snapshot(node.model, node.now)
    since = params.since if params.since is not None else params.baseline.ts if params.baseline else None
    xids = [
        health.Xid(event.ts, event.gpu_index, event.xid or 0, event.data, "simulator")
        for event in node.model.xids
        if since is None or event.ts >= since
    ]
    measurements, absent = health.judge(now, params, xids, xids_judged=since is not None)
    result.add(*measurements)
    result.evidence.update(snapshot=health.to_evidence(now), since=since, not_reported=absent)
    result.evidence["kernel_log"] = "simulated: the model's XID history"


def _storage(params: StorageParams, node: _Node, result: ResultBuilder) -> None:
    directory = params.directory or "/tmp"
    result.ran_on("simulated", f"simulated NVMe at {directory}", TOOL)
    result.evidence.update(directory=directory, size_bytes=params.size_bytes, read_cache_bypass="O_DIRECT")
    result.add(
        measurement("write", node.figures.storage_write_gbps * node.jitter(), "GB/s", params.min_write_gbps),
        measurement("read", node.figures.storage_read_gbps * node.jitter(), "GB/s", params.min_read_gbps),
        measurement("mismatched_blocks", 0, "count", 0, "at_most"),
    )


def _dcgm_diag(params: DcgmDiagParams, node: _Node, result: ResultBuilder) -> None:
    raise CheckSkipped("dcgmi is not on PATH (a simulated node has no DCGM)")


def _gpu_burn(params: GpuBurnParams, node: _Node, result: ResultBuilder) -> None:
    result.evidence["instead_of_gpu_burn"] = "gpu-burn is not on PATH: the built-in compute stress ran"
    dtype: Dtype = "fp64" if params.doubles else "tf32" if params.tensor_cores else "fp32"
    limit = {dtype: params.min_tflops} if params.min_tflops else None
    _compute(
        ComputeParams(duration_s=params.duration_s, dtypes=[dtype], gpus=params.gpus, min_tflops=limit), node, result
    )


SIMULATIONS: Final[dict[str, Callable[[Any, _Node, ResultBuilder], None]]] = {
    "compute": _compute,
    "memory_bandwidth": _memory,
    "pcie": _pcie,
    "nvlink": _nvlink,
    "nccl_allreduce": _allreduce,
    "health": _health,
    "storage": _storage,
    "dcgm_diag": _dcgm_diag,
    "gpu_burn": _gpu_burn,
}
