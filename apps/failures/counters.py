"""Failures read from telemetry counters, for what happens without an XID (or before it arrives).

The telemetry ingest calls these with the previous and the current sample of the same GPU (or
port). Counters are compared, never judged alone: a GPU whose rows had already failed when the
server started raises nothing until something changes (the XID 64 it logged then did). Volatile
counters go back to zero when the driver reloads or the GPU is reset; a drop is not an error.
A counter that moves while an XID accounting for it is active on the GPU (an uncorrected ECC count
after XID 48) is linked to that XID as its side effect (apps/failures/recording.py).
"""

from datetime import datetime

from django.utils import timezone

from agents.protocol import GpuSample, PortSample
from apps.failures import conditions
from apps.failures import xid as catalog
from apps.failures.conditions import Condition, Observation
from apps.failures.events import port_name
from apps.failures.models import Failure
from apps.failures.recording import raise_failure

TELEMETRY_ACTOR = "system:telemetry"
RECOVERY_ACTION_CHANGED = 154  # the XID the driver logs when the recovery action changes


def _rose(prev: int | None, cur: int | None) -> bool:
    return prev is not None and cur is not None and cur > prev


def _became_true(prev: bool | None, cur: bool | None) -> bool:
    return prev is False and cur is True


def failures_from_sample_deltas(
    node_id: int, prev: GpuSample | None, cur: GpuSample, *, at: datetime | None = None
) -> list[Failure]:
    """Failures raised (or counted again) by what changed between two samples of one GPU."""
    if prev is None:
        return []
    at = at or timezone.now()
    found: list[tuple[Condition, str]] = []
    if _rose(prev.ecc_uncorrected_volatile, cur.ecc_uncorrected_volatile):
        found.append(
            (
                conditions.ECC_UNCORRECTED,
                f"Uncorrected volatile ECC count rose from {prev.ecc_uncorrected_volatile} "
                f"to {cur.ecc_uncorrected_volatile}.",
            )
        )
    if _became_true(prev.remapped_rows_pending, cur.remapped_rows_pending):
        found.append((conditions.ROW_REMAP_PENDING, "A row is pending remapping."))
    if _became_true(prev.remapped_rows_failed, cur.remapped_rows_failed):
        found.append((conditions.ROW_REMAP_FAILED, "Row remapping failed."))
    failures = [
        raise_failure(
            Observation(
                node_id=node_id,
                at=at,
                condition=condition,
                gpu_index=cur.index,
                detail=detail,
                recovery_action=cur.recovery_action,
            ),
            actor=TELEMETRY_ACTOR,
        )
        for condition, detail in found
    ]
    if cur.recovery_action is not None and cur.recovery_action != prev.recovery_action:
        failures += _recovery_action_changed(node_id, cur.index, cur.recovery_action, at)
    return failures


def _recovery_action_changed(node_id: int, gpu_index: int, action: int, at: datetime) -> list[Failure]:
    """Show the new recovery action on the GPU's active failures; if it asks for something and the GPU
    has none, raise one as the driver's XID 154 would."""
    updated = Failure.objects.active().filter(node_id=node_id, gpu_index=gpu_index).update(recovery_action=action)
    if updated or action == catalog.NO_RECOVERY_ACTION:
        return []
    observation = Observation(
        node_id=node_id,
        at=at,
        condition=conditions.xid_condition(RECOVERY_ACTION_CHANGED),
        gpu_index=gpu_index,
        xid=RECOVERY_ACTION_CHANGED,
        detail=catalog.recovery_action(action).text,
        recovery_action=action,
    )
    return [raise_failure(observation, actor=TELEMETRY_ACTOR)]


def failures_from_port_deltas(
    node_id: int, prev: PortSample | None, cur: PortSample, *, at: datetime | None = None
) -> list[Failure]:
    """A port that went down, or whose link-downed counter rose (a flap between two samples)."""
    if prev is None:
        return []
    went_down = prev.state == "active" and cur.state != "active"
    flapped = _rose(prev.link_downed, cur.link_downed)
    if not (went_down or flapped):
        return []
    detail = f"State {prev.state} → {cur.state}; link downed counter {prev.link_downed} → {cur.link_downed}."
    observation = Observation(
        node_id=node_id,
        at=at or timezone.now(),
        condition=conditions.PORT_DOWN,
        port_name=port_name(cur.device, cur.port),
        detail=detail,
    )
    return [raise_failure(observation, actor=TELEMETRY_ACTOR)]
