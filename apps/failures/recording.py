"""Turning an observation into a failure: open a new one, or collapse a repeat into the one that is
still open, and link a side effect to its cause. Every source (agent events, telemetry counters,
liveness, stragglers) comes through ``raise_failure``.

A side effect and its cause may arrive in either order: XIDs come in the agent's events stream,
counters in its telemetry stream, each batched and replayed on its own. So the link is made both
ways: a new side effect looks for its cause, and a new cause adopts the side effects already open
on its GPU. Both use the same window around the cause's sightings.
"""

from datetime import timedelta
from typing import Final

from django.db import IntegrityError, transaction

from apps.accounts.audit import record
from apps.failures import xid as catalog
from apps.failures.choices import FailureKind, most_severe
from apps.failures.conditions import Observation
from apps.failures.models import Failure
from apps.inventory.models import Gpu, NetworkPort

# How far from a cause's sightings a side effect on the same GPU is still put down to it. The driver
# logs the teardown within seconds; a minute leaves room for agents that batch, and for a counter
# read in a sample taken a little before or after the XID's event.
SIDE_EFFECT_WINDOW: Final = timedelta(seconds=60)


def find_cause(observation: Observation) -> Failure | None:
    """The active failure on the same GPU this observation is a side effect of, if any: a fatal XID
    whose teardown it belongs to, or an XID that already accounts for a counter that moved."""
    if observation.gpu_index is None:
        return None
    cause_xids = catalog.possible_causes(observation.condition.code)
    if not cause_xids:
        return None
    return (
        Failure.objects.alarms()
        .filter(
            node_id=observation.node_id,
            gpu_index=observation.gpu_index,
            kind=FailureKind.XID,
            xid__in=cause_xids,
            first_seen__lte=observation.at + SIDE_EFFECT_WINDOW,
            last_seen__gte=observation.at - SIDE_EFFECT_WINDOW,
        )
        .order_by("-last_seen", "-id")
        .first()
    )


def adopt_side_effects(cause: Failure, *, actor: str) -> int:
    """Link to a newly opened XID the failures on its GPU that turn out to be its side effects
    (they arrived first); they leave the feed, and the audit log says why."""
    if cause.xid is None or cause.gpu_index is None:
        return 0
    earlier = list(
        Failure.objects.alarms()
        .select_for_update()
        .filter(
            node_id=cause.node_id,
            gpu_index=cause.gpu_index,
            code__in=catalog.possible_effects(cause.xid),
            last_seen__gte=cause.first_seen - SIDE_EFFECT_WINDOW,
        )
        .exclude(pk=cause.pk)
    )
    for failure in earlier:
        failure.cause = cause
        failure.save(update_fields=["cause"])
        record("failure.link", actor=actor, obj=failure, side_effect_of=cause.pk)
        failure.announce("linked")
    told = [f for f in earlier if f.recovery_action is not None]
    if told and cause.recovery_action is None:
        _take_recovery_action(cause, max(told, key=lambda f: f.last_seen).recovery_action)
    return len(earlier)


def raise_failure(observation: Observation, *, actor: str, ongoing: bool = False) -> Failure:
    """Open a failure for the observation, or count it against the active one it repeats. With none
    active (never raised, or resolved while the condition lasted), the sighting opens a new one.

    ``actor`` names the source in the audit log ("system:agent", "system:liveness", ...); opening a
    failure is logged, a repeat is only counted (an XID storm must not flood the audit log).

    ``ongoing``: the sighting of a condition that lasts, made again while it lasts (a GPU still
    throttling, rows still pending): it counts into whichever active failure the condition has on
    the GPU or port, a side effect's included, rather than opening one beside it once its cause's
    sightings are long past.
    """
    with transaction.atomic():
        cause = find_cause(observation)
        same = (
            Failure.objects.active()
            .select_for_update()
            .filter(
                node_id=observation.node_id,
                gpu_index=observation.gpu_index,
                port_name=observation.port_name,
                code=observation.condition.code,
            )
        )
        failure = (same if ongoing else same.filter(cause=cause)).first()
        if failure is None:
            failure = _open(observation, cause, actor=actor)
            if failure is not None:
                adopt_side_effects(failure, actor=actor)
                _pass_recovery_action_to(cause, observation)
                return failure
            failure = same.get(cause=cause)  # another consumer opened it between our read and our insert
        _count_repeat(failure, observation)
        _pass_recovery_action_to(cause, observation)
        return failure


def _open(observation: Observation, cause: Failure | None, *, actor: str) -> Failure | None:
    """The new failure, audited; None when a concurrent consumer's insert won the unique index."""
    gpu = port = None
    if observation.gpu_index is not None:
        gpu = Gpu.objects.filter(node_id=observation.node_id, index=observation.gpu_index).first()
    if observation.port_name:
        device, _, number = observation.port_name.partition("/")
        port = NetworkPort.objects.filter(node_id=observation.node_id, device_name=device, port_num=number).first()
    condition = observation.condition
    try:
        with transaction.atomic():
            failure = Failure.objects.create(
                node_id=observation.node_id,
                gpu_index=observation.gpu_index,
                gpu=gpu,
                port_name=observation.port_name,
                port=port,
                kind=condition.kind,
                code=condition.code,
                xid=observation.xid,
                severity=observation.severity,
                title=condition.title,
                detail=observation.detail,
                recommended_action=condition.action,
                recovery_action=observation.recovery_action,
                cause=cause,
                first_seen=observation.at,
                last_seen=observation.at,
            )
    except IntegrityError:
        return None
    record(
        "failure.open",
        actor=actor,
        obj=failure,
        code=failure.code,
        severity=failure.severity,
        side_effect_of=cause.pk if cause else None,
    )
    failure.announce("opened")
    return failure


def _count_repeat(failure: Failure, observation: Observation) -> None:
    """Count a repeat into a failure whose row this transaction holds locked. Sightings may arrive out
    of order (an agent replays its buffer after a reconnect), so the window only ever widens."""
    failure.count += 1
    if observation.at >= failure.last_seen:
        failure.last_seen = observation.at
        failure.detail = observation.detail or failure.detail
        if observation.recovery_action is not None:
            failure.recovery_action = observation.recovery_action
    failure.first_seen = min(failure.first_seen, observation.at)
    failure.severity = most_severe(failure.severity, observation.severity)
    failure.save(update_fields=["count", "first_seen", "last_seen", "detail", "recovery_action", "severity"])
    failure.announce("repeated")


def _pass_recovery_action_to(cause: Failure | None, observation: Observation) -> None:
    """A side effect that carries NVML's recovery action (XID 154) tells what its cause needs."""
    if cause is not None and observation.recovery_action is not None:
        _take_recovery_action(cause, observation.recovery_action)


def _take_recovery_action(failure: Failure, action: int) -> None:
    failure.recovery_action = action
    failure.severity = most_severe(failure.severity, catalog.recovery_action(action).severity)
    Failure.objects.filter(pk=failure.pk).update(recovery_action=action, severity=failure.severity)
    failure.announce("recovery_action")
