"""What a failure's advice asks of the node's lifecycle, and a failure as the reason for a move.

A failure's ``recommended_action`` is words for a person ("drain the node and reset the GPU"). The
move in those words is named here, so that the pages can offer it as a button and the API can make
it: ``recommended_move`` is the lifecycle state the advice takes the node to, or None when the advice
needs no lifecycle change (an application's fault, a node that is unreachable anyway).
apps/inventory/actions.py ``moves_toward`` turns it into the moves the node can make now.

- Drained: the advice resets the GPU, reboots the node or replaces a part, which first needs the
  node's work off it. Every fatal XID (the GPU needs a reset before it runs work again), the
  counters and links whose advice says so, and any recovery action NVML asks for.
- Burn-in: a straggler is tested before it goes back into a large job.
"""

from typing import Final

from apps.failures import conditions
from apps.failures import xid as catalog
from apps.failures.models import Failure
from apps.inventory.choices import Lifecycle

# Conditions, beyond the fatal XIDs, whose advice takes the node's work off it first.
DRAIN_FOR: Final = frozenset(
    {
        conditions.ECC_UNCORRECTED.code,
        conditions.ROW_REMAP_PENDING.code,
        conditions.ROW_REMAP_FAILED.code,
        conditions.NVLINK_ERROR.code,
        conditions.PCIE_ERROR.code,
        conditions.PORT_DOWN.code,
        conditions.POWER_BRAKE.code,  # "drain the node if it lasts"
        catalog.condition_code(63),  # reset at the next idle window
        catalog.condition_code(94),  # reset when idle to remap the row
        catalog.condition_code(123),  # reset when idle
    }
)
BURN_IN_FOR: Final = frozenset({conditions.STRAGGLER.code})


def recommended_move(failure: Failure) -> Lifecycle | None:
    """The lifecycle state ``failure``'s advice takes its node to; None: no lifecycle change."""
    if failure.code in BURN_IN_FOR:
        return Lifecycle.BURN_IN
    fatal = failure.xid is not None and catalog.lookup(failure.xid).fatal
    asks_for_recovery = failure.recovery_action not in (None, catalog.NO_RECOVERY_ACTION)
    if fatal or asks_for_recovery or failure.code in DRAIN_FOR:
        return Lifecycle.DRAINED
    return None


def as_reason(failure: Failure) -> str:
    """``failure`` in the words of a lifecycle change made for it: what the history and audit log keep."""
    where = [f"GPU {failure.gpu_index}" if failure.gpu_index is not None else "", failure.port_name]
    place = ", ".join(part for part in where if part)
    return f"Failure #{failure.pk}: {failure.title}" + (f" ({place})" if place else "")
