"""Events (agent → server, when there are any): XIDs and port transitions, numbered like telemetry."""

from typing import Annotated, Literal

import msgspec

from agents.protocol.base import (
    MAX_EVENTS_PER_FRAME,
    GpuIndex,
    Message,
    PortNumber,
    PortState,
    Seq,
    ShortText,
    Timestamp,
)


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
