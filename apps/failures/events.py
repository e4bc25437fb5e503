"""Where agent events and liveness changes become failures: the functions the gateway and the
telemetry event sink call.

- ``record_events(node_id, message)``: every event of an ``Events`` message, in one transaction.
  Call it only for a message whose seq is new (inside the transaction that advances the node's
  events cursor): a replayed message would otherwise be counted twice.
- ``node_unreachable(node_id)`` / ``node_recovered(node_id)``: the liveness hook, and
  ``nodes_still_unreachable(node_ids)`` for the nodes each sweep finds still silent.
- ``duplicate_identity(node_id, detail)`` / ``clock_skewed(node_id, offset_s)``: what the gateway
  refused from an agent that points at a fault of the node itself.
"""

from collections.abc import Iterable
from datetime import UTC, datetime

from django.db import transaction
from django.utils import timezone

from agents.protocol import Events, GpuEvent
from apps.accounts.audit import record
from apps.failures import conditions
from apps.failures import xid as catalog
from apps.failures.choices import FailureKind
from apps.failures.conditions import Observation
from apps.failures.models import Failure
from apps.failures.recording import raise_failure

AGENT_ACTOR = "system:agent"
LIVENESS_ACTOR = "system:liveness"


def port_name(device: str, port: int = 1) -> str:
    """The canonical name of an HCA port ("mlx5_0/1")."""
    return f"{device}/{port}"


def event_port_name(event: GpuEvent) -> str:
    """The port an event is about: ``port_device`` ("mlx5_0", or "mlx5_0/1" and "mlx5_0:1" from other
    agents) and the event's ``port`` number when the device alone is given (else port 1)."""
    device, separator, number = (event.port_device or "").replace(":", "/").partition("/")
    if separator and number.isdigit():
        return port_name(device, int(number))
    return port_name(device, event.port or 1)


def is_recovery(event: GpuEvent) -> bool:
    """A port that came back up and did not go down on the way: nothing new has failed. (A port event
    without its transition, from an agent older than those fields, is never taken for one.)"""
    return (
        event.kind == "port"
        and event.port_state == "active"
        and event.previous_port_state not in (None, "active")
        and event.link_downs is None
    )


def observe_event(node_id: int, event: GpuEvent) -> Observation:
    if event.xid is not None:
        condition = conditions.xid_condition(event.xid)
    elif event.kind == "xid":
        condition = conditions.XID_WITHOUT_CODE
    else:
        condition = conditions.EVENT_CONDITIONS[event.kind]
    return Observation(
        node_id=node_id,
        at=datetime.fromtimestamp(event.ts, tz=UTC),
        condition=condition,
        gpu_index=event.gpu_index,
        port_name=event_port_name(event) if event.port_device else "",
        xid=event.xid,
        detail=event.data,
    )


def record_event(node_id: int, event: GpuEvent) -> Failure | None:
    """The failure the event opened or repeated; None for an event that reports a recovery (a port
    back up: the failure its going down opened stays for someone to look at, since a link that went
    down once is a link to check)."""
    if is_recovery(event):
        return None
    return raise_failure(observe_event(node_id, event), actor=AGENT_ACTOR)


def record_events(node_id: int, message: Events) -> None:
    """Record a message's events oldest first, a fatal XID before others of the same instant, so its
    side effects find it (the driver logs them in that order; an agent may not keep it)."""

    def order(event: GpuEvent) -> tuple[float, bool]:
        return event.ts, not (event.xid is not None and catalog.lookup(event.xid).fatal)

    with transaction.atomic():
        for event in sorted(message.events, key=order):
            record_event(node_id, event)


def node_unreachable(node_id: int, *, at: datetime | None = None) -> Failure:
    """The node's heartbeats stopped: raise (or count again) its liveness failure."""
    observation = Observation(node_id=node_id, at=at or timezone.now(), condition=conditions.NODE_UNREACHABLE)
    return raise_failure(observation, actor=LIVENESS_ACTOR)


def nodes_still_unreachable(node_ids: Iterable[int], *, at: datetime | None = None) -> list[Failure]:
    """Nodes a sweep finds still unreachable: one whose liveness failure someone resolved while it
    stayed silent gets a new one (returned), as any condition still there does at its next sighting."""
    silent = set(node_ids)
    covered = Failure.objects.active().filter(node_id__in=silent, kind=FailureKind.LIVENESS).values_list("node_id")
    return [node_unreachable(node_id, at=at) for node_id in sorted(silent - {row[0] for row in covered})]


def node_recovered(node_id: int, *, at: datetime | None = None) -> list[Failure]:
    """The node's agent is back: resolve its active liveness failures (returned), with the audit trail."""
    at = at or timezone.now()
    resolved = []
    with transaction.atomic():
        for failure in Failure.objects.active().select_for_update().filter(node_id=node_id, kind=FailureKind.LIVENESS):
            failure.resolve(actor=LIVENESS_ACTOR, note=f"The agent reconnected at {at:%Y-%m-%d %H:%M:%S} UTC.")
            record("failure.resolve", actor=LIVENESS_ACTOR, obj=failure, note=failure.resolution_note)
            resolved.append(failure)
    return resolved


def duplicate_identity(node_id: int, detail: str, *, at: datetime | None = None) -> Failure:
    """The node reported a GPU UUID, serial or HCA GUID another live node holds: raise (or count) the
    failure on it; the gateway raises it on both nodes."""
    observation = Observation(
        node_id=node_id, at=at or timezone.now(), condition=conditions.DUPLICATE_GPU_IDENTITY, detail=detail
    )
    return raise_failure(observation, actor=AGENT_ACTOR)


def clock_skewed(node_id: int, offset_s: float, *, at: datetime | None = None) -> Failure:
    """The node's samples are stamped ``offset_s`` seconds ahead of the server's clock."""
    detail = f"The node's clock is {offset_s:.1f} s ahead of the control plane's."
    observation = Observation(node_id=node_id, at=at or timezone.now(), condition=conditions.CLOCK_SKEW, detail=detail)
    return raise_failure(observation, actor=AGENT_ACTOR)
