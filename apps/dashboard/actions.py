"""The lifecycle actions as the pages offer them.

- Every action the REST API has (apps/inventory/actions.py), to the roles allowed to take it: the
  node page's buttons and the nodes list's bulk bar.
- On each failure, the moves that carry out its advice from the state its node is in now
  (apps/failures/advice.py names the move, ``moves_toward`` finds the way there), and quarantine
  beside them: each one click, with the failure as the reason
  (``POST /api/v1/failures/<id>/node-action``). A note says when the advice cannot be followed to
  the letter ("from new a node cannot be drained") or is already done.
"""

from dataclasses import dataclass
from typing import Any, Final

from apps.failures.advice import recommended_move
from apps.failures.models import Failure
from apps.inventory.actions import ACTION_TO, OUT_OF_SERVICE, LifecycleAction, actions_for, moves_toward
from apps.inventory.choices import Lifecycle
from apps.inventory.models.nodes import LIFECYCLE_TRANSITIONS

# What a failure's advice can ask for (apps/failures/advice.py), "" for nothing.
ADVICE_TARGETS: Final = ("", Lifecycle.DRAINED, Lifecycle.BURN_IN)


def action_data(actions: tuple[LifecycleAction, ...]) -> list[dict[str, Any]]:
    """What the pages' scripts need to offer and run each action."""
    return [
        {
            "name": action.name,
            "label": action.label,
            "path": action.path,
            "target": action.target.value,
            "target_label": action.target.label,
            "reason_required": action.reason_required,
        }
        for action in actions
    ]


@dataclass(frozen=True)
class FailureMoves:
    actions: tuple[LifecycleAction, ...]  # best first; empty for a viewer
    note: str  # "" when the advice can be followed as written


def failure_moves(target: str, current: str, role: str | None) -> FailureMoves:
    """The moves a failure card offers for advice that takes the node to ``target`` ("": none), from
    the node's state ``current``, to ``role``."""
    current = Lifecycle(current)
    moves = moves_toward(target, current) if target else ()
    offered = [ACTION_TO[state] for state in moves]
    if Lifecycle.QUARANTINED in LIFECYCLE_TRANSITIONS[current] and Lifecycle.QUARANTINED not in moves:
        offered.append(ACTION_TO[Lifecycle.QUARANTINED])
    allowed = set(actions_for(role))
    return FailureMoves(tuple(action for action in offered if action in allowed), _note(target, current, moves))


def _note(target: str, current: Lifecycle, moves: tuple[Lifecycle, ...]) -> str:
    if not target or target in moves:
        return ""
    target = Lifecycle(target)
    if not moves:
        return f"Done: the node is {current.label.lower()}."
    if target in OUT_OF_SERVICE:
        return (
            f"From {current.label.lower()} a node cannot be {target.label.lower()}; "
            f"{ACTION_TO[moves[0]].label.lower()} keeps it out of service just the same."
        )
    ways = " or ".join(ACTION_TO[state].label.lower() for state in moves)
    return f"From {current.label.lower()} a node goes to {target.label.lower()} once out of service: {ways} first."


def move_table(role: str | None) -> dict[str, dict[str, dict[str, Any]]]:
    """``failure_moves`` for every advice and node state, for a page's script to draw live rows with:
    ``{advice target: {node state: {"actions": [action names], "note": text}}}``."""
    return {
        str(target): {
            state.value: {"actions": [a.name for a in moves.actions], "note": moves.note}
            for state in Lifecycle
            for moves in [failure_moves(target, state, role)]
        }
        for target in ADVICE_TARGETS
    }


def attach_moves(failures: list[Failure], role: str | None) -> None:
    """Give each failure (its node loaded) its ``moves`` (FailureMoves) and ``move`` (advice target)."""
    for failure in failures:
        failure.move = recommended_move(failure) or ""
        failure.moves = failure_moves(failure.move, failure.node.lifecycle, role)
