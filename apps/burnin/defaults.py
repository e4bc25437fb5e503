"""What ships: the built-in suites, and the default thresholds per GPU model with where each comes from.

Thresholds are rules over the measurements the checks report (docs/burn-in-checks.md): ``check`` and
``measurement`` name the figure (``pcie``/``h2d``, ``nvlink``/``p2p``, ``nccl_allreduce``/``busbw``),
``bound`` and ``value`` what it must reach, and ``at_size_bytes`` (all-reduce only) the message size
the figure must have been measured at for the rule to apply. A node type's first threshold version is
made from these defaults for its GPU model (``default_rules``); admins publish new versions.
"""

from dataclasses import dataclass
from typing import Any, Final

GIB: Final = 1 << 30


@dataclass(frozen=True)
class Defaults:
    key: str
    label: str
    rules: tuple[dict[str, Any], ...]
    source: str


def rule(
    check: str, measurement: str, value: float, unit: str, bound: str = "at_least", **extra: Any
) -> dict[str, Any]:
    return {"check": check, "measurement": measurement, "bound": bound, "value": value, "unit": unit, **extra}


# Every GPU: what no burn-in may leave behind, whatever the model (NVIDIA's guidance on ECC and row
# remapping; the health check's own rules, here so that an admin sees and versions them).
HEALTH: Final = (
    rule("health", "ecc_uncorrected_volatile", 0, "count", "at_most"),
    rule("health", "remapped_rows_pending", 0, "count", "at_most"),
    rule("health", "remapped_rows_failed", 0, "count", "at_most"),
    rule("health", "retired_pages_pending", 0, "count", "at_most"),
)

NHC = "Azure HPC Node Health Checks (github.com/Azure/azurehpc-health-checks)"


def _gpu(
    key: str, label: str, host: float, p2p: float, busbw: float, at_gib: int, bf16: float, copy: float, source: str
) -> Defaults:
    rules = (
        *HEALTH,
        rule("pcie", "h2d", host, "GB/s"),
        rule("pcie", "d2h", host, "GB/s"),
        rule("nvlink", "p2p", p2p, "GB/s"),
        rule("nccl_allreduce", "busbw", busbw, "GB/s", at_size_bytes=at_gib * GIB),
        rule("compute", "tflops_bf16", bf16, "TFLOP/s"),
        rule("memory_bandwidth", "copy", copy, "GB/s"),
    )
    return Defaults(key, label, rules, source)


OURS = (
    "The bf16 matmul and HBM copy floors are this project's: about 95 % and 85 % of what a healthy GPU of "
    "the model sustains in these checks (8192³ matmuls at the power cap; 1 GiB copies), so a straggler "
    "clocking 8 % below its siblings fails"
)

# Per GPU model: host↔device (PCIe h2d and d2h) and P2P GB/s, all-reduce bus bandwidth GB/s at a message
# size in GiB, bf16 TFLOP/s and HBM copy GB/s; then where the figures come from.
GPUS: Final = (
    # key, label, host, p2p, busbw, at GiB, bf16, copy, source
    ("h100_sxm", "NVIDIA H100 SXM", 52, 335, 460, 16, 720, 2500,
     f"{NHC}, conf/nd96isr_h100_v5.conf: check_gpu_bw 52 GB/s host↔device and 335 GB/s P2P, "
     f"check_nccl_allreduce 460 GB/s at 16G over 8 GPUs. {OURS}."),
    ("h200", "NVIDIA H200", 48, 335, 431, 16, 750, 3600,
     f"{NHC}, conf/nd96isr_h200_v5.conf: check_gpu_bw 48 GB/s host↔device and 335 GB/s P2P, "
     f"check_nccl_allreduce 431 GB/s at 16G over 8 GPUs. {OURS}."),
    ("b200", "NVIDIA B200", 48, 650, 700, 16, 1660, 5800,
     f"Host↔device 48 GB/s as {NHC} asks of Blackwell (conf/nd128isr_ndr_gb200_v6.conf, "
     "check_gpu_bw 48). No published health check gives HGX B200 NVLink figures yet: P2P 650 and "
     "all-reduce 700 GB/s at 16G are the H100 SXM figures scaled by NVLink 5's doubled bandwidth, less "
     f"a quarter; measure a known-good node and publish a version. {OURS}."),
    ("a100", "NVIDIA A100 SXM", 24, 230, 228, 4, 255, 1500,
     f"{NHC}, conf/nd96amsr_a100_v4.conf: check_cuda_bw 24 GB/s host↔device, check_nccl_allreduce "
     f"228 GB/s at 4G over 8 GPUs; P2P 230 GB/s is this project's (NVLink 3: 300 each way). {OURS}."),
)  # fmt: skip

DEFAULTS: Final[dict[str, Defaults]] = {row[0]: _gpu(*row) for row in GPUS} | {
    "other": Defaults(
        "other",
        "any other GPU",
        HEALTH,
        "No published figures for this GPU model: only the health rules, until an admin publishes a version.",
    ),
}

# How NVML names each model ('NVIDIA H100 80GB HBM3', 'NVIDIA H200'): what the name holds, what it must
# not (the PCIe and NVL cards are other figures), and the defaults it gets; the first match wins.
MODEL_NAMES: Final = (
    ("H100", ("PCIE", "NVL"), "h100_sxm"),
    ("H200", ("NVL",), "h200"),
    ("B200", (), "b200"),
    ("A100", ("PCIE",), "a100"),
)


def defaults_for(gpu_model: str) -> Defaults:
    """The defaults of the GPU model as NVML names it ('NVIDIA H100 80GB HBM3', 'NVIDIA H200')."""
    name = gpu_model.upper()
    for holds, not_holds, key in MODEL_NAMES:
        if holds in name and not any(other in name for other in not_holds):
            return DEFAULTS[key]
    return DEFAULTS["other"]


# The built-in suites ----------------------------------------------------------------------------------
# Each a list of steps as Run steps take them (check, params, time_limit_s). A burn-in runs health first
# and last, and hands the first one's snapshot to the last as its baseline (outcomes.py).


def step(check: str, time_limit_s: int = 600, **params: Any) -> dict[str, Any]:
    return {"check": check, "params": params, "time_limit_s": time_limit_s}


SUITES: Final[dict[str, dict[str, Any]]] = {
    "quick": {
        "title": "Quick",
        "description": "Minutes: health, a short bf16 GEMM, PCIe, NVLink and the all-reduce inside the node, "
        "health again.",
        "steps": [
            step("health", 120),
            step("compute", 300, duration_s=30, dtypes=["bf16"]),
            step("pcie", 300),
            step("nvlink", 300),
            step("nccl_allreduce", 600),
            step("health", 120),
        ],
    },
    "standard": {
        "title": "Standard",
        "description": "About half an hour: every dtype for a minute, HBM, PCIe, NVLink, the all-reduce, "
        "a checkpoint-sized write and read, dcgmi diag -r 2 where installed.",
        "steps": [
            step("health", 120),
            step("dcgm_diag", 600, level=2),
            step("compute", 900, duration_s=60),
            step("memory_bandwidth", 300),
            step("pcie", 300),
            step("nvlink", 300),
            step("nccl_allreduce", 900),
            step("storage", 900),
            step("health", 120),
        ],
    },
    "extended": {
        "title": "Extended",
        "description": "Hours: the standard suite with dcgmi diag -r 3 where installed, five minutes of every "
        "dtype and ten of gpu-burn.",
        "steps": [
            step("health", 120),
            step("dcgm_diag", 2400, level=3),
            step("compute", 3600, duration_s=300),
            step("gpu_burn", 1200, duration_s=600),
            step("memory_bandwidth", 300),
            step("pcie", 300),
            step("nvlink", 300),
            step("nccl_allreduce", 900),
            step("storage", 900),
            step("health", 120),
        ],
    },
}
