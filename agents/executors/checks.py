"""Every check by name: what parameters it takes and the function that runs it."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from agents.executors import allreduce, bandwidth, compute, health, nvlink, storage
from agents.executors.context import CheckContext
from agents.executors.params import (
    AllReduceParams,
    ComputeParams,
    DcgmDiagParams,
    GpuBurnParams,
    HealthParams,
    MemoryBandwidthParams,
    NvlinkParams,
    Params,
    PcieParams,
    StorageParams,
)
from agents.executors.tools import dcgmi, gpu_burn
from agents.protocol import CheckName


@dataclass(frozen=True)
class Check:
    name: CheckName
    params: type[Params]
    run: Callable[[Any, CheckContext], None]
    summary: str


CHECKS: Final[dict[str, Check]] = {
    check.name: check
    for check in (
        Check("compute", ComputeParams, compute.run, "sustained matmuls per dtype: TFLOP/s, its stability, throttling"),
        Check("memory_bandwidth", MemoryBandwidthParams, bandwidth.run_memory, "device-to-device copy GB/s per GPU"),
        Check("pcie", PcieParams, bandwidth.run_pcie, "pinned host↔device GB/s per GPU, both directions"),
        Check("nvlink", NvlinkParams, nvlink.run, "peer-to-peer copy GB/s between every GPU pair"),
        Check("nccl_allreduce", AllReduceParams, allreduce.run, "all-reduce bus bandwidth under torchrun"),
        Check("health", HealthParams, health.run, "ECC, row remapping, XIDs, NVLink/PCIe/InfiniBand errors"),
        Check("storage", StorageParams, storage.run, "checkpoint-sized write and read-back GB/s"),
        Check("dcgm_diag", DcgmDiagParams, dcgmi.run_check, "dcgmi diag -r LEVEL, per test and GPU"),
        Check(
            "gpu_burn", GpuBurnParams, gpu_burn.run_check, "gpu-burn's per-GPU verdicts (built-in stress without it)"
        ),
    )
}
