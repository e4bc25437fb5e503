"""What every message is built from: the protocol's version and limits, the field types with the ranges
they accept, the two numbered streams, and the ``Message`` base class."""

from typing import Annotated, Final, Literal

import msgspec

PROTOCOL_VERSION: Final = 1
MAX_FRAME_BYTES: Final = 1 << 20  # 1 MiB: a replayed backlog is sent in several frames
MAX_GPUS_PER_NODE: Final = 72  # NVL72 racks are the largest NVLink domain shipping
MAX_PORTS_PER_NODE: Final = 64
MAX_SAMPLES_PER_FRAME: Final = 600
MAX_EVENTS_PER_FRAME: Final = 1000
# How far a frame's seq may run ahead of what the server stores for its stream. An agent numbers one frame
# per sample interval (and skips at most a block of 1024 at a restart): its default buffer holds about
# 94,000 one-second frames (26 hours), and this is over ten times that. The server refuses a frame
# beyond it (one frame must not move a node's cursor to the end of time); an agent whose never-sent
# frames fell beyond it, after an outage longer than that, renumbers them (agents/buffer.py).
MAX_SEQ_AHEAD: Final = 1 << 20

# Numeric ranges: every number on the wire has both bounds. NVML and sysfs counters are unsigned 64-bit;
# msgspec bounds are int64, and no real counter reaches 2**63.
LARGEST: Final = 2**63 - 1
Counter = Annotated[int, msgspec.Meta(ge=0, le=LARGEST)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
Celsius = Annotated[float, msgspec.Meta(ge=-40, le=150)]
Watts = Annotated[float, msgspec.Meta(ge=0, le=5000)]
Megahertz = Annotated[int, msgspec.Meta(ge=0, le=10_000)]
Mebibytes = Annotated[int, msgspec.Meta(ge=0, le=4 * 1024 * 1024)]
Gbps = Annotated[float, msgspec.Meta(ge=0, le=10_000)]
KBps = Annotated[int, msgspec.Meta(ge=0, le=10**10)]
GpuIndex = Annotated[int, msgspec.Meta(ge=0, lt=MAX_GPUS_PER_NODE)]
Timestamp = Annotated[float, msgspec.Meta(ge=1_500_000_000, le=4_102_444_800)]  # 2017 .. 2100, seconds
Seq = Annotated[int, msgspec.Meta(ge=1, le=LARGEST)]
Cursor = Annotated[int, msgspec.Meta(ge=0, le=LARGEST)]  # a stream's highest stored seq; 0 before the first
RowId = Annotated[int, msgspec.Meta(ge=1, le=LARGEST)]  # a database row's id, as the server names a node
ShortText = Annotated[str, msgspec.Meta(max_length=128)]
Hostname = Annotated[
    str, msgspec.Meta(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
]
GpuUuid = Annotated[
    str, msgspec.Meta(pattern=r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
]
# A command's idempotency key (agents/protocol/commands.py): the agent runs each key at most once.
CommandKey = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]
PortState = Literal["active", "down", "init", "polling", "unknown"]
PortDevice = Annotated[str, msgspec.Meta(min_length=1, max_length=32)]  # an HCA, "mlx5_0"
PortNumber = Annotated[int, msgspec.Meta(ge=1, le=255)]  # a port of that HCA
# The two numbered streams, named as their frames' types: every Telemetry and every Events frame takes
# the next seq of its own stream, and the server acknowledges (or refuses) per stream.
Stream = Literal["telemetry", "events"]
STREAMS: Final[tuple[Stream, ...]] = ("telemetry", "events")


class Message(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """Base of every message; the subclass's tag is the JSON ``type`` field."""
