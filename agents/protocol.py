"""Every message between a node agent and the control plane, validated on both sides.

One module, imported by the agent (which never imports Django) and by the server's gateway
consumer, so the two cannot drift apart. Messages are JSON objects with a ``type`` tag, encoded
and decoded with msgspec, which rejects unknown fields, wrong types, NaN and infinity, and any
value outside the ranges declared here; ``decode_agent_message`` turns all of those into a
``ProtocolError`` with a code, a message naming the field, and the frame's seq and stream as far as
they can be read, for the server's error reply.

A field a GPU does not support is absent (None), never zero.

Compatibility: a new optional field (one with a default) does not change ``PROTOCOL_VERSION``. A
server that knows it accepts agents that never send it (an agent that predates it), and reads it as
absent; an agent that sends it needs a server that knows it, since unknown fields are refused: upgrade
the control plane before its agents. Removing or retyping a field, or a new required one, is a new
version. (The port events' structured fields, ``port`` to ``link_downs`` on ``GpuEvent``, came this way.)
"""

from collections.abc import Sequence
from enum import IntEnum
from typing import Annotated, Final, Literal

import msgspec

PROTOCOL_VERSION: Final = 1
MAX_FRAME_BYTES: Final = 1 << 20  # 1 MiB: a replayed backlog is sent in several frames
MAX_GPUS_PER_NODE: Final = 72  # NVL72 racks are the largest NVLink domain shipping
MAX_PORTS_PER_NODE: Final = 64
MAX_SAMPLES_PER_FRAME: Final = 600
MAX_EVENTS_PER_FRAME: Final = 1000

# Numeric ranges. NVML and sysfs counters are unsigned 64-bit; msgspec bounds are int64, and no real
# counter reaches 2**63.
Counter = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
Celsius = Annotated[float, msgspec.Meta(ge=-40, le=150)]
Watts = Annotated[float, msgspec.Meta(ge=0, le=5000)]
Megahertz = Annotated[int, msgspec.Meta(ge=0, le=10_000)]
Mebibytes = Annotated[int, msgspec.Meta(ge=0, le=4 * 1024 * 1024)]
Gbps = Annotated[float, msgspec.Meta(ge=0, le=10_000)]
KBps = Annotated[int, msgspec.Meta(ge=0, le=10**10)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, lt=MAX_GPUS_PER_NODE)]
Timestamp = Annotated[float, msgspec.Meta(ge=1_500_000_000, le=4_102_444_800)]  # 2017 .. 2100, seconds
Seq = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
ShortText = Annotated[str, msgspec.Meta(max_length=128)]
Hostname = Annotated[
    str, msgspec.Meta(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
]
GpuUuid = Annotated[
    str, msgspec.Meta(pattern=r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
]
PortState = Literal["active", "down", "init", "polling", "unknown"]
PortDevice = Annotated[str, msgspec.Meta(min_length=1, max_length=32)]  # an HCA, "mlx5_0"
PortNumber = Annotated[int, msgspec.Meta(ge=1, le=255)]  # a port of that HCA
# The two numbered streams, named as their frames' types: every Telemetry and every Events frame takes
# the next seq of its own stream, and the server acknowledges (or refuses) per stream.
Stream = Literal["telemetry", "events"]
STREAMS: Final[tuple[Stream, ...]] = ("telemetry", "events")


class Range(msgspec.Struct, frozen=True):
    """The bounds a numeric type above declares (its ``msgspec.Meta``), for code that keeps a value inside
    what the protocol accepts before it builds a message, such as a collector leaving out one wild reading."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def __contains__(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )


def range_of(numeric: object) -> Range:
    """The range of a numeric type, or of the number in an optional one: ``range_of(Gbps)`` is 0 to 10,000."""
    found = _range(msgspec.inspect.type_info(numeric))
    if found is None:
        raise TypeError(f"{numeric!r} is not a numeric type")
    return found


def field_ranges(struct: type[msgspec.Struct]) -> dict[str, Range]:
    """The range of each numeric field of a message or part of one, by field name."""
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    return {field.name: found for field in info.fields if (found := _range(field.type)) is not None}


def _range(info: msgspec.inspect.Type) -> Range | None:
    for kind in info.types if isinstance(info, msgspec.inspect.UnionType) else (info,):
        if isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType):
            return Range(ge=kind.ge, gt=kind.gt, le=kind.le, lt=kind.lt)
    return None


class CloseCode(IntEnum):
    """Why either side closed the agent socket: the standard codes it uses (RFC 6455 §7.4.1) and its own
    (4000-4999, private use), each named once here for the server that sends it and the agent that reads it."""

    GOING_AWAY = 1001
    """The agent is stopping (SIGTERM): a clean goodbye."""
    INTERNAL_ERROR = 1011
    """A bug in one of the agent's connection loops: it drops this connection and reconnects."""
    UNAUTHORIZED = 4401
    """The credential is missing, invalid or revoked. The agent logs it as an error and retries only after
    the backoff's cap: re-enrolling fixes it, and a credential restored on the server is picked up again."""
    FORBIDDEN = 4403
    """The agent claimed to be another node than its credential's (in Hello or Inventory)."""
    SUPERSEDED = 4409
    """A newer connection of the same node took over (one socket per node)."""
    PROTOCOL_VERSION = 4426
    """The server does not speak the Hello's protocol version."""


class Message(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """Base of every message; the subclass's tag is the JSON ``type`` field."""


# Inventory (agent → server, on connect and whenever it changes) ---------------------------------


class NvLinkPeer(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    link: Annotated[int, msgspec.Meta(ge=0, lt=64)]
    active: bool
    peer_pci_bus_id: ShortText | None = None  # a peer GPU or an NVSwitch


class GpuInfo(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    index: GpuIndex
    uuid: GpuUuid
    name: ShortText
    serial: ShortText | None = None
    memory_mib: Mebibytes | None = None
    pci_bus_id: ShortText | None = None
    power_limit_w: Watts | None = None
    pcie_gen: Annotated[int, msgspec.Meta(ge=1, le=7)] | None = None
    pcie_width: Annotated[int, msgspec.Meta(ge=1, le=32)] | None = None  # gen and width the link can reach
    # The width the link trained at: under pcie_width means a degraded slot, riser or cable. (The current
    # generation is not inventory: GPUs drop to Gen1 when idle to save power.)
    pcie_width_current: Annotated[int, msgspec.Meta(ge=1, le=32)] | None = None
    nvlinks: list[NvLinkPeer] = []


class PortInfo(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    device: PortDevice
    port: PortNumber
    kind: Literal["infiniband", "roce", "ethernet"]
    rate_gbps: Gbps
    state: PortState
    physical_state: ShortText | None = None
    guid: ShortText | None = None


class HostFacts(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    hostname: Hostname
    driver_version: ShortText | None = None
    cuda_version: ShortText | None = None
    kernel: ShortText | None = None
    os: ShortText | None = None
    cpu_model: ShortText | None = None
    cpu_count: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None
    memory_gib: Annotated[float, msgspec.Meta(ge=0, le=1 << 20)] | None = None


class Inventory(Message, tag="inventory"):
    host: HostFacts
    gpus: Annotated[list[GpuInfo], msgspec.Meta(max_length=MAX_GPUS_PER_NODE)]
    ports: Annotated[list[PortInfo], msgspec.Meta(max_length=MAX_PORTS_PER_NODE)]


# Telemetry (agent → server, every interval; replayed from the buffer after a disconnect) --------


class GpuSample(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, array_like=False):
    index: GpuIndex
    util_gpu: Percent | None = None
    util_mem: Percent | None = None
    mem_used_mib: Mebibytes | None = None
    temp_c: Celsius | None = None
    power_w: Watts | None = None
    power_limit_w: Watts | None = None
    sm_clock_mhz: Megahertz | None = None
    mem_clock_mhz: Megahertz | None = None
    throttle_reasons: Counter | None = None  # NVML clocks-event-reasons bitmask
    ecc_corrected_volatile: Counter | None = None
    ecc_uncorrected_volatile: Counter | None = None
    ecc_corrected_aggregate: Counter | None = None
    ecc_uncorrected_aggregate: Counter | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    remapped_rows_correctable: Counter | None = None
    remapped_rows_uncorrectable: Counter | None = None
    pcie_replay_count: Counter | None = None
    nvlink_crc_errors: Counter | None = None
    nvlink_replay_errors: Counter | None = None
    nvlink_recovery_errors: Counter | None = None
    pcie_tx_kbps: KBps | None = None
    pcie_rx_kbps: KBps | None = None
    nvlink_tx_kbps: KBps | None = None
    nvlink_rx_kbps: KBps | None = None
    recovery_action: Annotated[int, msgspec.Meta(ge=0, le=16)] | None = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION


class PortSample(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    device: PortDevice
    port: PortNumber
    state: PortState
    rate_gbps: Gbps | None = None
    tx_gbps: Gbps | None = None
    rx_gbps: Gbps | None = None
    symbol_errors: Counter | None = None
    link_downed: Counter | None = None
    rcv_errors: Counter | None = None


class NodeSample(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    ts: Timestamp
    gpus: Annotated[list[GpuSample], msgspec.Meta(max_length=MAX_GPUS_PER_NODE)]
    ports: Annotated[list[PortSample], msgspec.Meta(max_length=MAX_PORTS_PER_NODE)] = []


class Telemetry(Message, tag="telemetry"):
    """One or more samples, numbered: the server acknowledges by ``seq`` and drops a seq it has."""

    seq: Seq
    samples: Annotated[list[NodeSample], msgspec.Meta(min_length=1, max_length=MAX_SAMPLES_PER_FRAME)]


class GpuEvent(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Something that happened to a GPU or a port. ``data`` says it for people; what the server acts on
    is in the typed fields (an XID's number, a port's transition)."""

    ts: Timestamp
    kind: Literal["xid", "ecc", "thermal", "pcie", "nvlink", "port"]
    gpu_index: GpuIndex | None = None
    port_device: ShortText | None = None
    xid: Annotated[int, msgspec.Meta(ge=1, le=1000)] | None = None
    data: Annotated[str, msgspec.Meta(max_length=1024)] = ""
    # A port event's transition between two samples: the port, its state now, the state it changed from
    # (absent when it did not change), and how often the link went down meanwhile (link_downed's increase;
    # absent when none, so a flap shorter than the sampling interval still shows).
    port: PortNumber | None = None
    port_state: PortState | None = None
    previous_port_state: PortState | None = None
    link_downs: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)] | None = None


class Events(Message, tag="events"):
    seq: Seq
    events: Annotated[list[GpuEvent], msgspec.Meta(min_length=1, max_length=MAX_EVENTS_PER_FRAME)]


class Hello(Message, tag="hello"):
    protocol: Annotated[int, msgspec.Meta(ge=1)]
    agent_version: ShortText
    hostname: Hostname
    simulated: bool = False
    buffered_samples: Annotated[int, msgspec.Meta(ge=0)] = 0
    dropped_samples: Annotated[int, msgspec.Meta(ge=0)] = 0  # lost from a full buffer, ever (counted, not hidden)


class Heartbeat(Message, tag="heartbeat"):
    ts: Timestamp
    buffered_samples: Annotated[int, msgspec.Meta(ge=0)] = 0
    dropped_samples: Annotated[int, msgspec.Meta(ge=0)] = 0


AgentMessage = Hello | Inventory | Telemetry | Events | Heartbeat


# Server → agent ------------------------------------------------------------------------------


class Welcome(Message, tag="welcome"):
    node_id: int
    hostname: Hostname
    telemetry_interval_s: Annotated[float, msgspec.Meta(ge=0.1, le=3600)]
    last_telemetry_seq: Annotated[int, msgspec.Meta(ge=0)]  # the agent drops what the server already has
    last_events_seq: Annotated[int, msgspec.Meta(ge=0)]


class Ack(Message, tag="ack"):
    stream: Stream
    seq: Annotated[int, msgspec.Meta(ge=0)]


ErrorCode = Literal[
    "malformed", "unknown_type", "invalid", "oversize", "protocol_version", "forbidden", "not_ready", "internal"
]


class Error(Message, tag="error"):
    code: ErrorCode
    message: Annotated[str, msgspec.Meta(max_length=2000)]
    seq: int | None = None  # the frame's seq when it had one, so the agent knows what was refused
    stream: Stream | None = None  # which stream that seq belongs to


ServerMessage = Welcome | Ack | Error


# Encoding and decoding ----------------------------------------------------------------------


class ProtocolError(Exception):
    """A refused frame: the code and message of the Error reply, and the frame's seq and stream as far
    as they could be read from it, so the agent knows what was refused."""

    def __init__(self, code: ErrorCode, message: str, *, seq: int | None = None, stream: Stream | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.seq = seq
        self.stream = stream

    def reply(self) -> Error:
        return Error(code=self.code, message=self.message, seq=self.seq, stream=self.stream)


_encoder = msgspec.json.Encoder()
_agent_decoder = msgspec.json.Decoder(AgentMessage)
_server_decoder = msgspec.json.Decoder(ServerMessage)
_AGENT_TAGS = frozenset(t.__struct_config__.tag for t in AgentMessage.__args__)


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


class FrameSplicer:
    """A stream's frames put together from samples or events encoded one at a time: the agent encodes
    and validates each item once, buffers the bytes, and packs them into frames later, byte for byte
    the frame ``encode()`` gives for the same message, without decoding anything again.

    The pieces around the seq and the items are cut from what ``encode()`` writes for an empty frame
    numbered with the largest seq, so they cannot drift from the encoder."""

    def __init__(self, message: type[Telemetry] | type[Events]) -> None:
        info = msgspec.inspect.type_info(message)
        assert isinstance(info, msgspec.inspect.StructType)
        (items,) = (field for field in info.fields if field.name != "seq")
        assert isinstance(items.type, msgspec.inspect.ListType)
        assert items.type.max_length is not None
        largest_seq = str(2**63 - 1).encode()
        empty = encode(message(seq=int(largest_seq), **{items.name: []}))
        self._head, self._items_open = empty.removesuffix(b"]}").split(largest_seq)
        self.stream: Stream = message.__struct_config__.tag  # type: ignore[assignment]
        self.max_items = items.type.max_length  # MAX_SAMPLES_PER_FRAME, MAX_EVENTS_PER_FRAME
        # The most the items may take, joined with commas, so that the frame fits MAX_FRAME_BYTES with any seq.
        self.max_items_bytes = MAX_FRAME_BYTES - len(empty)

    def fits(self, count: int, items_bytes: int) -> bool:
        """Whether ``count`` items taking ``items_bytes`` (joined with commas) fit in one frame."""
        return count <= self.max_items and items_bytes <= self.max_items_bytes

    def frame(self, seq: int, items: Sequence[bytes]) -> bytes:
        return b"".join((self._head, str(seq).encode(), self._items_open, b",".join(items), b"]}"))


FRAME_SPLICERS: Final[dict[Stream, FrameSplicer]] = {
    splicer.stream: splicer for splicer in (FrameSplicer(Telemetry), FrameSplicer(Events))
}


def message_seq(message: Message) -> tuple[int | None, Stream | None]:
    """The seq and stream of a numbered frame (Telemetry, Events); ``(None, None)`` for other messages."""
    if isinstance(message, Telemetry | Events):
        return message.seq, message.__struct_config__.tag  # type: ignore[return-value]
    return None, None


class _Header(msgspec.Struct):
    """What a frame that failed validation says about itself; any JSON value is accepted in each field."""

    type: object = None
    seq: object = None


_header_decoder = msgspec.json.Decoder(_Header)


def _decode(frame: bytes | str, decoder: msgspec.json.Decoder, tags: frozenset[str]) -> Message:
    if len(frame) > MAX_FRAME_BYTES:
        _, seq, stream = _header(frame)
        message = f"Frame of {len(frame)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit."
        raise ProtocolError("oversize", message, seq=seq, stream=stream)
    try:
        return decoder.decode(frame)
    except msgspec.ValidationError as exc:
        kind, seq, stream = _header(frame)
        if isinstance(kind, str) and kind not in tags:
            message = f"Unknown message type {kind!r}; expected one of {sorted(tags)}."
            raise ProtocolError("unknown_type", message, seq=seq) from exc
        raise ProtocolError("invalid", str(exc), seq=seq, stream=stream) from exc
    except msgspec.DecodeError as exc:
        raise ProtocolError("malformed", f"Not a JSON message: {exc}") from exc


def _header(frame: bytes | str) -> tuple[object, int | None, Stream | None]:
    """The type, seq and stream a refused frame names, each None where it names none (or is no JSON object)."""
    try:
        header = _header_decoder.decode(frame)
    except msgspec.DecodeError:
        return None, None, None
    seq = header.seq if type(header.seq) is int else None  # not a bool, a string or a float
    return header.type, seq, header.type if header.type in STREAMS else None  # type: ignore[return-value]


def decode_agent_message(frame: bytes | str) -> AgentMessage:
    """Server side: a frame from an agent, or ProtocolError with a code and a clear message."""
    return _decode(frame, _agent_decoder, _AGENT_TAGS)  # type: ignore[return-value]


_SERVER_TAGS = frozenset(t.__struct_config__.tag for t in ServerMessage.__args__)


def decode_server_message(frame: bytes | str) -> ServerMessage:
    """Agent side: a frame from the server."""
    return _decode(frame, _server_decoder, _SERVER_TAGS)  # type: ignore[return-value]


# Commands and check results (a burn-in check's process → the agent → the server) -------------
#
# A burn-in check runs as a process of its own (``python -m agents.executors CHECK --params JSON``)
# and writes JSON lines on stdout: progress and log lines while it runs, one result when it ends.
# The agent's command runner validates every line with ``decode_check_line`` before relaying it,
# and the server validates it again. A result carries each figure with its unit, the value it was
# judged against (when the command gave one) and its raw evidence, and says what produced it:
# ``device`` is "cuda", "cpu" or "simulated", never left for the reader to guess.

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
Figure = Annotated[float, msgspec.Meta(ge=-1e15, le=1e15)]
MeasurementName = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")]
LongText = Annotated[str, msgspec.Meta(max_length=2000)]
EvidenceKey = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Evidence = Annotated[dict[EvidenceKey, object], msgspec.Meta(max_length=64)]  # any JSON; see _check_evidence
_INFINITY: Final = float("inf")


def _finite(value: float) -> bool:
    return -_INFINITY < value < _INFINITY  # false for NaN too


def meets(measured: float, expected: float, bound: Bound) -> bool:
    """Whether ``measured`` passes against ``expected``: the one rule both sides judge by."""
    return measured >= expected if bound == "at_least" else measured <= expected


def _check_evidence(evidence: dict[str, object], limit: int) -> None:
    """Free-form evidence, bounded: JSON values only, finite numbers, nested at most
    MAX_EVIDENCE_DEPTH deep, at most ``limit`` bytes encoded. ValueError names what is wrong (on
    decoding, msgspec reports it as a ValidationError)."""
    _check_value(evidence, 0)
    size = len(_encoder.encode(evidence))
    if size > limit:
        raise ValueError(f"evidence of {size} bytes exceeds the {limit}-byte limit")


def _check_value(value: object, depth: int) -> None:
    if depth > MAX_EVIDENCE_DEPTH:
        raise ValueError(f"evidence nested deeper than {MAX_EVIDENCE_DEPTH} levels")
    if isinstance(value, float) and not _finite(value):
        raise ValueError("evidence holds a NaN or infinite number")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"evidence key {key!r} is not text")
            _check_value(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_value(item, depth + 1)
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise ValueError(f"evidence holds a {type(value).__name__}, which is not a JSON value")


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
        _check_evidence(self.evidence, MAX_MEASUREMENT_EVIDENCE_BYTES)


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
        _check_evidence(self.evidence, MAX_RESULT_EVIDENCE_BYTES)


class CheckProgress(Message, tag="check_progress"):
    check: CheckName
    fraction: Annotated[float, msgspec.Meta(ge=0, le=1)]
    step: ShortText  # "bf16 on 8 GPUs", "write", "all-reduce 1 GiB"
    message: Annotated[str, msgspec.Meta(max_length=500)] = ""


class CheckLog(Message, tag="check_log"):
    check: CheckName
    level: Literal["debug", "info", "warning", "error"]
    message: LongText


CheckLine = CheckProgress | CheckLog | CheckResult

_check_line_decoder = msgspec.json.Decoder(CheckLine)
_CHECK_LINE_TAGS = frozenset(t.__struct_config__.tag for t in CheckLine.__args__)


def decode_check_line(line: bytes | str) -> CheckLine:
    """A line a check process wrote, or ProtocolError with a code and a message naming the field."""
    if len(line) > MAX_CHECK_LINE_BYTES:
        raise ProtocolError("oversize", f"Line of {len(line)} bytes exceeds the {MAX_CHECK_LINE_BYTES}-byte limit.")
    return _decode(line, _check_line_decoder, _CHECK_LINE_TAGS)  # type: ignore[return-value]
