"""Failures read from telemetry counters, for what happens without an XID (or before it arrives).

The telemetry watch (apps/failures/watch.py) compares each GPU's sample with the one before it, at
the sample's own time (so it lines up with the agent's XID events), and calls
``failures_from_sample_deltas`` when a watched counter moved. A change is compared, never judged
alone: a GPU whose rows had already failed when the server started raises nothing from here (the
XID 64 it logged then did; the watch sights the state again once it has lasted a minute). Volatile
counters go back to zero when the driver reloads or the GPU is reset; a drop is not an error.
A counter that moves while an XID accounting for it is active on the GPU (an uncorrected ECC count
after XID 48) is linked to that XID as its side effect (apps/failures/recording.py).

Ports need nothing here: the agent already turns a port's state and link-downed changes into
``port`` events (agents.collectors.infiniband.port_event), which events.py records.
"""

from datetime import datetime

from django.utils import timezone

from agents.protocol import GpuSample
from apps.failures import conditions
from apps.failures import xid as catalog
from apps.failures.conditions import Condition, Observation
from apps.failures.models import Failure
from apps.failures.recording import raise_failure

TELEMETRY_ACTOR = "system:telemetry"
RECOVERY_ACTION_CHANGED = 154  # the XID the driver logs when the recovery action changes


def watched(sample: GpuSample) -> tuple[object, ...]:
    """What ``failures_from_sample_deltas`` compares: when it is unchanged, nothing moved."""
    return (
        sample.ecc_uncorrected_volatile,
        sample.remapped_rows_pending,
        sample.remapped_rows_failed,
        sample.recovery_action,
    )


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
        failures += recovery_action_seen(node_id, cur.index, cur.recovery_action, at)
    return failures


def recovery_action_seen(node_id: int, gpu_index: int, action: int, at: datetime) -> list[Failure]:
    """Show the recovery action on the GPU's active failures; if it asks for something and the GPU
    has none (never had, or they were resolved while the GPU still asks), raise one as the driver's
    XID 154 would."""
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
