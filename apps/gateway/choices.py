"""Named choices of the agent gateway."""

from django.db import models


class ChangeKind(models.TextChoices):
    GPU_ADDED = "gpu_added", "GPU added"
    GPU_REMOVED = "gpu_removed", "GPU removed"
    GPU_SWAPPED = "gpu_swapped", "GPU swapped"
    PORT_ADDED = "port_added", "Port added"
    PORT_REMOVED = "port_removed", "Port removed"
    PORT_CHANGED = "port_changed", "Port changed"
    HOST_CHANGED = "host_changed", "Host changed"


class CounterCode(models.TextChoices):
    """Why the gateway refused something: the protocol's error codes, plus refused connections."""

    MALFORMED = "malformed", "Malformed frame"
    UNKNOWN_TYPE = "unknown_type", "Unknown message type"
    INVALID = "invalid", "Invalid message"
    OVERSIZE = "oversize", "Oversize frame"
    PROTOCOL_VERSION = "protocol_version", "Unsupported protocol version"
    FORBIDDEN = "forbidden", "Forbidden (a node speaking for another)"
    NOT_READY = "not_ready", "Server not ready"
    INTERNAL = "internal", "Internal error"
    UNAUTHORIZED = "unauthorized", "Connection refused (missing, invalid or revoked credential)"
    ERROR_FLOOD = "error_flood", "Connection closed for too many errors"
    CLOCK_SKEW = "clock_skew", "Frame stamped in the future (clock skew)"
    SEQ_AHEAD = "seq_ahead", "Seq further ahead than an agent's buffer can hold"
    IDENTITY_CONFLICT = "identity_conflict", "GPU or HCA identity another live node holds"


class EnrollmentTokenState(models.TextChoices):
    USABLE = "usable", "Usable"
    USED = "used", "Used"
    EXPIRED = "expired", "Expired"
    REVOKED = "revoked", "Revoked"
