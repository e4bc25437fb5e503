"""What each check accepts, validated like the wire protocol (unknown fields, wrong types and values
out of range are refused with the field's name). The control plane builds these from a suite and
the node type's thresholds; every expected value is optional, and a check given one judges its
figure against it, so its result says pass or fail by itself.

All sizes are bytes, all rates decimal GB/s (10⁹ bytes a second) and TFLOP/s (10¹² a second)."""

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

import msgspec

from agents.protocol import MAX_GPUS_PER_NODE, Celsius, GpuIndex, NodeSample, ShortText, Timestamp

KIB: Final = 1024
MIB: Final = 1024 * KIB
GIB: Final = 1024 * MIB

Dtype = Literal["bf16", "fp16", "tf32", "fp32", "fp64"]
Rate = Annotated[float, msgspec.Meta(gt=0, le=1e9)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=7 * 86400)]
Repeats = Annotated[int, msgspec.Meta(ge=1, le=10_000)]
Tolerance = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
BufferBytes = Annotated[int, msgspec.Meta(ge=MIB, le=64 * GIB)]
Gpus = Annotated[list[GpuIndex], msgspec.Meta(min_length=1, max_length=MAX_GPUS_PER_NODE)]
Endpoint = Annotated[str, msgspec.Meta(max_length=260, pattern=r"^[A-Za-z0-9.:\[\]-]+:[0-9]{1,5}$")]


# XID 13 (graphics engine exception), 31 (MMU fault), 43 (GPU stopped processing) and 45 (preemptive
# cleanup) are what a program's own bug or exit causes, or the aftermath of another XID.
APPLICATION_XIDS: Final = (13, 31, 43, 45)


class ParamsError(ValueError):
    """Parameters a check cannot run with; the message names the field."""


class Params(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    def __post_init__(self) -> None:
        gpus = getattr(self, "gpus", None)
        if gpus is not None and len(set(gpus)) != len(gpus):
            raise ValueError(f"gpus lists a GPU twice: {gpus}")


class TorchParams(Params):
    device: Literal["auto", "cuda", "cpu"] = "auto"  # auto: the GPUs when torch sees any, else the CPU
    gpus: Gpus | None = None  # default: every GPU of the node


class ComputeParams(TorchParams):
    duration_s: Seconds = 60.0  # for each dtype
    dtypes: Annotated[list[Dtype], msgspec.Meta(min_length=1, max_length=5)] | None = None
    size: Annotated[int, msgspec.Meta(ge=64, le=32768)] | None = None  # M = N = K; default 8192 on a GPU
    window_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 1.0  # one TFLOP/s sample per window
    min_tflops: dict[Dtype, Rate] | None = None  # per GPU
    max_drop: Fraction = 0.1  # the last quarter of the run this much below the first fails
    max_temp_c: Celsius | None = None
    fail_on_throttle: bool = True  # thermal, hardware-slowdown or power-brake throttling fails
    sample_interval_s: Annotated[float, msgspec.Meta(ge=0.05, le=60)] = 1.0


class MemoryBandwidthParams(TorchParams):
    size_bytes: BufferBytes | None = None  # default 1 GiB on a GPU, 256 MiB on the CPU
    repeats: Repeats = 20
    min_gbps: Rate | None = None


class PcieParams(TorchParams):
    size_bytes: BufferBytes = 256 * MIB
    repeats: Repeats = 20
    min_h2d_gbps: Rate | None = None
    min_d2h_gbps: Rate | None = None


class NvlinkParams(TorchParams):
    size_bytes: BufferBytes = 256 * MIB
    repeats: Repeats = 10
    min_gbps: Rate | None = None  # per GPU pair, one direction


class AllReduceParams(TorchParams):
    # Default sweep: 1 MiB to 16 GiB by 4x on GPUs, 4 KiB to 4 MiB on the CPU.
    sizes_bytes: (
        Annotated[list[Annotated[int, msgspec.Meta(ge=4, le=64 * GIB)]], msgspec.Meta(min_length=1, max_length=40)]
        | None
    ) = None
    iters: Repeats = 20
    warmup: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 5
    dtype: Literal["fp32", "bf16", "fp16"] = "fp32"
    nproc_per_node: Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS_PER_NODE)] | None = (
        None  # default: GPUs, or 2 CPU ranks
    )
    nnodes: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1
    node_rank: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 0
    rendezvous: Endpoint | None = None  # host:port of node 0's rendezvous; required with nnodes > 1
    theoretical_busbw_gbps: Rate | None = None  # the fabric's figure, from the inventory
    min_busbw_fraction: Fraction = 0.8
    min_busbw_gbps: Rate | None = None  # an absolute threshold instead of the fraction
    ring: bool | None = None  # measure with NCCL_ALGO=Ring too; default: when nnodes > 1
    implementation: Literal["auto", "torch", "nccl-tests"] = "auto"
    timeout_s: Seconds = 1800.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} is not below nnodes {self.nnodes}")
        if self.nnodes > 1 and self.rendezvous is None:
            raise ValueError("a multi-node all-reduce needs rendezvous (host:port of node 0)")

    @property
    def expected_busbw_gbps(self) -> float | None:
        if self.min_busbw_gbps is not None:
            return self.min_busbw_gbps
        if self.theoretical_busbw_gbps is not None:
            return self.theoretical_busbw_gbps * self.min_busbw_fraction
        return None


class HealthParams(Params):
    baseline: NodeSample | None = None  # the snapshot of an earlier health check (its evidence["snapshot"])
    since: Timestamp | None = None  # XIDs from here on count; default: the baseline's time
    expected_gpus: Annotated[int, msgspec.Meta(ge=0, le=MAX_GPUS_PER_NODE)] | None = None
    ignore_xids: Annotated[list[Annotated[int, msgspec.Meta(ge=1, le=1000)]], msgspec.Meta(max_length=100)] = (
        msgspec.field(default_factory=lambda: list(APPLICATION_XIDS))
    )
    ignore_ports: Annotated[list[ShortText], msgspec.Meta(max_length=64)] = []  # "mlx5_4", or "mlx5_4/1"
    # Largest increase since the baseline that still passes.
    max_nvlink_crc_errors: Tolerance = 100
    max_nvlink_replay_errors: Tolerance = 100
    max_pcie_replays: Tolerance = 100
    max_ib_symbol_errors: Tolerance = 100
    max_ib_rcv_errors: Tolerance = 100
    kernel_log: bool = True  # read XIDs from /dev/kmsg when this user may


class StorageParams(Params):
    directory: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None  # default: $TMPDIR
    size_bytes: Annotated[int, msgspec.Meta(ge=MIB, le=1 << 40)] = 4 * GIB
    block_bytes: Annotated[int, msgspec.Meta(ge=64 * KIB, le=256 * MIB, multiple_of=4096)] = 16 * MIB
    min_write_gbps: Rate | None = None
    min_read_gbps: Rate | None = None


class DcgmDiagParams(Params):
    level: Literal[1, 2, 3, 4] = 1  # 1 takes seconds, 2 about two minutes, 3 about fifteen, 4 an hour or more
    gpus: Gpus | None = None
    timeout_s: Seconds | None = None  # default: by level


class GpuBurnParams(Params):
    duration_s: Annotated[float, msgspec.Meta(ge=1, le=7 * 86400)] = 60.0
    doubles: bool = False
    tensor_cores: bool = True
    memory_percent: Annotated[int, msgspec.Meta(ge=1, le=100)] = 90
    compare_file: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None  # compare.ptx
    gpus: Gpus | None = None  # gpu-burn takes one GPU (-i) or all
    min_tflops: Rate | None = None  # per GPU, from its Gflop/s


def decode_params(kind: type[Params], raw: bytes | str | Mapping[str, Any] | None) -> Any:
    """``raw`` (JSON text or a mapping; None for the defaults) as ``kind``, or ParamsError."""
    try:
        if raw is None:
            return kind()
        if isinstance(raw, Mapping):
            return msgspec.convert(dict(raw), kind)
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise ParamsError(f"bad parameters for {kind.__name__}: {error}") from None
