"""Every message between a node agent and the control plane, validated on both sides.

One package, imported by the agent (which never imports Django) and by the server's gateway
consumer, so the two cannot drift apart; import its names from here (``from agents.protocol import
Telemetry``). Messages are JSON objects with a ``type`` tag, encoded
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

Its modules: ``base`` (version, limits, field types, streams, the ``Message`` base), ``ranges`` (the
field types' ranges read back), ``session`` (Hello, Heartbeat, Welcome, Ack, Error, close codes),
``inventory``, ``telemetry``, ``events``, ``checks`` (a check process's lines), ``commands`` (what
the server asks an agent to run and what the agent answers), ``codec`` (encoding,
decoding, ``ProtocolError``), ``frames`` (numbered frames and their splicing) and ``messages`` (what
each side sends, and its decoder).
"""

from agents.protocol.base import (
    LARGEST,
    MAX_EVENTS_PER_FRAME,
    MAX_FRAME_BYTES,
    MAX_GPUS_PER_NODE,
    MAX_PORTS_PER_NODE,
    MAX_SAMPLES_PER_FRAME,
    MAX_SEQ_AHEAD,
    PROTOCOL_VERSION,
    STREAMS,
    Celsius,
    CommandKey,
    Counter,
    Cursor,
    Gbps,
    GpuIndex,
    GpuUuid,
    Hostname,
    KBps,
    Mebibytes,
    Megahertz,
    Message,
    Percent,
    PortDevice,
    PortNumber,
    PortState,
    RowId,
    Seq,
    ShortText,
    Stream,
    Timestamp,
    Watts,
)
from agents.protocol.checks import (
    MAX_CHECK_LINE_BYTES,
    MAX_EVIDENCE_DEPTH,
    MAX_MEASUREMENT_EVIDENCE_BYTES,
    MAX_MEASUREMENTS_PER_RESULT,
    MAX_RESULT_EVIDENCE_BYTES,
    Bound,
    CheckDevice,
    CheckLine,
    CheckLog,
    CheckMeasurement,
    CheckName,
    CheckProgress,
    CheckResult,
    Evidence,
    EvidenceKey,
    Figure,
    LogLevel,
    LongText,
    MeasurementName,
    MeasurementUnit,
    decode_check_line,
    meets,
)
from agents.protocol.codec import ProtocolError, encode
from agents.protocol.commands import (
    ENV_PREFIXES,
    MAX_OUTPUT_CHARS,
    MAX_PARAMS_BYTES,
    MAX_TIME_LIMIT_S,
    Cancel,
    Command,
    CommandOutcome,
    CommandResult,
    CommandStarted,
    CommandUpdate,
)
from agents.protocol.events import Events, GpuEvent
from agents.protocol.frames import FRAME_SPLICERS, FrameSplicer, message_seq
from agents.protocol.inventory import GpuInfo, HostFacts, Inventory, NvLinkPeer, PortInfo
from agents.protocol.messages import AgentMessage, ServerMessage, decode_agent_message, decode_server_message
from agents.protocol.ranges import Range, field_ranges, range_of
from agents.protocol.session import Ack, CloseCode, Error, ErrorCode, Heartbeat, Hello, Welcome
from agents.protocol.telemetry import GpuSample, NodeSample, PortSample, Telemetry

__all__ = [
    "ENV_PREFIXES",
    "FRAME_SPLICERS",
    "LARGEST",
    "MAX_CHECK_LINE_BYTES",
    "MAX_EVENTS_PER_FRAME",
    "MAX_EVIDENCE_DEPTH",
    "MAX_FRAME_BYTES",
    "MAX_GPUS_PER_NODE",
    "MAX_MEASUREMENTS_PER_RESULT",
    "MAX_MEASUREMENT_EVIDENCE_BYTES",
    "MAX_OUTPUT_CHARS",
    "MAX_PARAMS_BYTES",
    "MAX_PORTS_PER_NODE",
    "MAX_RESULT_EVIDENCE_BYTES",
    "MAX_SAMPLES_PER_FRAME",
    "MAX_SEQ_AHEAD",
    "MAX_TIME_LIMIT_S",
    "PROTOCOL_VERSION",
    "STREAMS",
    "Ack",
    "AgentMessage",
    "Bound",
    "Cancel",
    "Celsius",
    "CheckDevice",
    "CheckLine",
    "CheckLog",
    "CheckMeasurement",
    "CheckName",
    "CheckProgress",
    "CheckResult",
    "CloseCode",
    "Command",
    "CommandKey",
    "CommandOutcome",
    "CommandResult",
    "CommandStarted",
    "CommandUpdate",
    "Counter",
    "Cursor",
    "Error",
    "ErrorCode",
    "Events",
    "Evidence",
    "EvidenceKey",
    "Figure",
    "FrameSplicer",
    "Gbps",
    "GpuEvent",
    "GpuIndex",
    "GpuInfo",
    "GpuSample",
    "GpuUuid",
    "Heartbeat",
    "Hello",
    "HostFacts",
    "Hostname",
    "Inventory",
    "KBps",
    "LogLevel",
    "LongText",
    "MeasurementName",
    "MeasurementUnit",
    "Mebibytes",
    "Megahertz",
    "Message",
    "NodeSample",
    "NvLinkPeer",
    "Percent",
    "PortDevice",
    "PortInfo",
    "PortNumber",
    "PortSample",
    "PortState",
    "ProtocolError",
    "Range",
    "RowId",
    "Seq",
    "ServerMessage",
    "ShortText",
    "Stream",
    "Telemetry",
    "Timestamp",
    "Watts",
    "Welcome",
    "decode_agent_message",
    "decode_check_line",
    "decode_server_message",
    "encode",
    "field_ranges",
    "meets",
    "message_seq",
    "range_of",
]
