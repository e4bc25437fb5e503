"""Check results and their progress and log lines (a burn-in check's process → the agent → the server).

A burn-in check runs as a process of its own (``python -m agents.executors CHECK --params JSON``)
and writes JSON lines on stdout: progress and log lines while it runs, one result when it ends.
The agent's command runner validates every line with ``decode_check_line`` before relaying it,
and the server validates it again. A result carries each figure with its unit, the value it was
judged against (when the command gave one) and its raw evidence, and says what produced it:
``device`` is "cuda", "cpu" or "simulated", never left for the reader to guess."""

from typing import Annotated, Final, Literal

import msgspec

from agents.protocol.base import GpuIndex, Message, ShortText, Timestamp
from agents.protocol.codec import Decoder, ProtocolError

MAX_MEASUREMENTS_PER_RESULT: Final = 1024  # an 8-GPU NVLink matrix is 56, a 32-GPU one 992
MAX_RESULT_EVIDENCE_BYTES: Final = 128 * 1024  # encoded; a health snapshot of 72 GPUs fits
MAX_MEASUREMENT_EVIDENCE_BYTES: Final = 4 * 1024
MAX_EVIDENCE_DEPTH: Final = 6
MAX_CHECK_LINE_BYTES: Final = 512 * 1024  # under MAX_FRAME_BYTES, so a relayed line fits a frame

CheckName = Literal[
    "compute", "memory_bandwidth", "pcie", "nvlink", "nccl_allreduce", "health", "storage", "dcgm_diag", "gpu_burn"
]  # fmt: skip
CheckDevice = Literal["cuda", "cpu", "simulated"]
MeasurementUnit = Literal["TFLOP/s", "GB/s", "count", "degC", "W", "MHz", "ratio", "s", "bytes"]
# A figure passes when it is at least (a bandwidth) or at most (an error count) its expected value.
Bound = Literal["at_least", "at_most"]
LogLevel = Literal["debug", "info", "warning", "error"]
Figure = Annotated[float, msgspec.Meta(ge=-1e15, le=1e15)]
MeasurementName = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")]
LongText = Annotated[str, msgspec.Meta(max_length=2000)]
EvidenceKey = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Evidence = Annotated[dict[EvidenceKey, object], msgspec.Meta(max_length=64)]  # any JSON; see check_json_object
_INFINITY: Final = float("inf")


def _finite(value: float) -> bool:
    return -_INFINITY < value < _INFINITY  # false for NaN too


def meets(measured: float, expected: float, bound: Bound) -> bool:
    """Whether ``measured`` passes against ``expected``: the one rule both sides judge by."""
    return measured >= expected if bound == "at_least" else measured <= expected


def check_json_object(value: dict[str, object], limit: int, what: str = "evidence") -> None:
    """Free-form JSON (a result's evidence, a command's parameters), bounded: JSON values only, finite
    numbers, nested at most MAX_EVIDENCE_DEPTH deep, at most ``limit`` bytes encoded. ValueError names
    what is wrong (on decoding, msgspec reports it as a ValidationError)."""
    _check_value(value, 0, what)
    size = len(msgspec.json.encode(value))
    if size > limit:
        raise ValueError(f"{what} of {size} bytes exceeds the {limit}-byte limit")


def _check_value(value: object, depth: int, what: str) -> None:
    if depth > MAX_EVIDENCE_DEPTH:
        raise ValueError(f"{what} nested deeper than {MAX_EVIDENCE_DEPTH} levels")
    if isinstance(value, float) and not _finite(value):
        raise ValueError(f"{what} holds a NaN or infinite number")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{what} key {key!r} is not text")
            _check_value(item, depth + 1, what)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_value(item, depth + 1, what)
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise ValueError(f"{what} holds a {type(value).__name__}, which is not a JSON value")


class CheckMeasurement(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """One figure of a check: a GPU's bf16 TFLOP/s, a GPU pair's P2P GB/s, a counter's increase.

    ``expected`` is the value it was judged against, from the command's parameters; without one it
    is None and so is ``passed`` (the server judges it later), unless the verdict is a tool's own
    (gpu-burn's FAULTY, a dcgmi test's Skip), which ``evidence`` then shows."""

    name: MeasurementName
    measured: Figure
    unit: MeasurementUnit
    expected: Figure | None = None
    bound: Bound = "at_least"
    passed: bool | None = None
    gpu: GpuIndex | None = None
    peer: GpuIndex | None = None  # the other end of a GPU pair (NVLink P2P)
    port: ShortText | None = None  # a network port, as "mlx5_0/1"
    evidence: Evidence = {}

    def __post_init__(self) -> None:
        if not _finite(self.measured) or (self.expected is not None and not _finite(self.expected)):
            raise ValueError(f"measurement {self.name}: figures must be finite numbers")
        if self.expected is not None and self.passed != meets(self.measured, self.expected, self.bound):
            raise ValueError(
                f"measurement {self.name}: passed={self.passed} contradicts measured {self.measured} "
                f"{self.bound.replace('_', ' ')} expected {self.expected}"
            )
        check_json_object(self.evidence, MAX_MEASUREMENT_EVIDENCE_BYTES)


class CheckResult(Message, tag="check_result"):
    """The last line a check writes. ``passed`` is True only when something was judged and all of it
    passed, False when anything failed, None when nothing was judged, the check was skipped
    (``skipped`` says why: no dcgmi on this node, one GPU and no pairs) or could not finish
    (``error`` says why; the measurements made before it stay)."""

    check: CheckName
    device: CheckDevice
    device_name: ShortText  # "NVIDIA H100 80GB HBM3", the CPU's model, "simulated NVIDIA H200"
    tool: ShortText  # what measured: "torch 2.4.1", "nccl-tests 2.13.9", "dcgmi 3.3.7", "simulator"
    started: Timestamp
    finished: Timestamp
    passed: bool | None = None
    measurements: Annotated[list[CheckMeasurement], msgspec.Meta(max_length=MAX_MEASUREMENTS_PER_RESULT)] = []
    error: LongText | None = None
    skipped: LongText | None = None
    evidence: Evidence = {}

    def __post_init__(self) -> None:
        if self.finished < self.started:
            raise ValueError("a check cannot finish before it started")
        if self.error is not None and self.skipped is not None:
            raise ValueError("a check is either skipped or in error, not both")
        verdicts = [m.passed for m in self.measurements if m.passed is not None]
        if False in verdicts and self.passed is not False:
            raise ValueError("a check with a failed measurement has passed=false")
        if self.passed is True and (self.error is not None or self.skipped is not None or not verdicts):
            raise ValueError("passed=true needs judged measurements and no error or skip")
        check_json_object(self.evidence, MAX_RESULT_EVIDENCE_BYTES)


class CheckProgress(Message, tag="check_progress"):
    check: CheckName
    fraction: Annotated[float, msgspec.Meta(ge=0, le=1)]
    step: ShortText  # "bf16 on 8 GPUs", "write", "all-reduce 1 GiB"
    message: Annotated[str, msgspec.Meta(max_length=500)] = ""


class CheckLog(Message, tag="check_log"):
    check: CheckName
    level: LogLevel
    message: LongText


CheckLine = CheckProgress | CheckLog | CheckResult

_check_line_decoder = Decoder(CheckLine)


def decode_check_line(line: bytes | str) -> CheckLine:
    """A line a check process wrote, or ProtocolError with a code and a message naming the field."""
    if len(line) > MAX_CHECK_LINE_BYTES:
        raise ProtocolError("oversize", f"Line of {len(line)} bytes exceeds the {MAX_CHECK_LINE_BYTES}-byte limit.")
    return _check_line_decoder.decode(line)  # type: ignore[return-value]
