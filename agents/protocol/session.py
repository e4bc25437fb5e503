"""The connection itself: the agent's Hello and Heartbeat, the server's Welcome, Ack and Error, and the
codes either side closes the socket with."""

from enum import IntEnum
from typing import Annotated, Literal

import msgspec

from agents.protocol.base import (
    CommandKey,
    Counter,
    Cursor,
    Hostname,
    Message,
    RowId,
    Seq,
    ShortText,
    Stream,
    Timestamp,
)


class CloseCode(IntEnum):
    """Why either side closed the agent socket: the standard codes it uses (RFC 6455 §7.4.1) and its own
    (4000-4999, private use), each named once here for the server that sends it and the agent that reads it."""

    GOING_AWAY = 1001
    """The agent is stopping (SIGTERM): a clean goodbye."""
    INTERNAL_ERROR = 1011
    """A bug in one of the agent's connection loops, or in the server's consumer of the socket: the side
    that hit it drops this connection, and the agent reconnects."""
    UNAUTHORIZED = 4401
    """The credential is missing, invalid or revoked. The agent logs it as an error and retries only after
    the backoff's cap: re-enrolling fixes it, and a credential restored on the server is picked up again."""
    FORBIDDEN = 4403
    """The agent claimed to be another node than its credential's (in Hello or Inventory)."""
    SUPERSEDED = 4409
    """A newer connection of the same node took over (one socket per node)."""
    PROTOCOL_VERSION = 4426
    """The server does not speak the Hello's protocol version."""
    SEQS_RESET = 4410
    """An admin reset the node's stored seqs (or a new credential began a new epoch): reconnect, and the
    Welcome says where the server's cursors are now."""
    TOO_MANY_ERRORS = 4429
    """The server answered too many of this connection's frames with an Error in a short window."""


class Hello(Message, tag="hello"):
    protocol: Annotated[int, msgspec.Meta(ge=1, le=1000)]
    agent_version: ShortText
    hostname: Hostname
    simulated: bool = False
    buffered_samples: Counter = 0
    dropped_samples: Counter = 0  # lost from a full buffer, ever (counted, not hidden)


class Heartbeat(Message, tag="heartbeat"):
    ts: Timestamp
    buffered_samples: Counter = 0
    dropped_samples: Counter = 0


class Welcome(Message, tag="welcome"):
    node_id: RowId
    hostname: Hostname
    telemetry_interval_s: Annotated[float, msgspec.Meta(ge=0.1, le=3600)]
    last_telemetry_seq: Cursor  # the agent drops what the server already has
    last_events_seq: Cursor


class Ack(Message, tag="ack"):
    stream: Stream
    seq: Cursor


ErrorCode = Literal[
    "malformed", "unknown_type", "invalid", "oversize", "protocol_version", "forbidden", "not_ready", "internal"
]


class Error(Message, tag="error"):
    code: ErrorCode
    message: Annotated[str, msgspec.Meta(max_length=2000)]
    seq: Seq | None = None  # the frame's seq when it had one, so the agent knows what was refused
    stream: Stream | None = None  # which stream that seq belongs to
    key: CommandKey | None = None  # the command a refused report was about
