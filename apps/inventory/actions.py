"""The lifecycle actions people take on a node, and the role each needs.

The REST API's ``POST /api/v1/nodes/<id>/<path>`` actions (apps/inventory/api/views.py) and the
dashboard's buttons are both made from ``LIFECYCLE_ACTIONS``, so the pages offer every move the API
allows, to the roles allowed to make it, and nothing else. Whether a move is allowed from a node's
state is the state machine's call (``LIFECYCLE_TRANSITIONS``, ``Node.transition``).

``moves_toward`` turns advice ("drain the node", "burn it in") into the moves that carry it out from
the state a node is in now: a node that is new cannot be drained, but quarantining it keeps it out
of service just the same.
"""

from typing import Final, NamedTuple

from apps.accounts.roles import Role, role_rank
from apps.inventory.choices import Lifecycle
from apps.inventory.models.nodes import LIFECYCLE_TRANSITIONS, REASON_REQUIRED


class LifecycleAction(NamedTuple):
    name: str  # the viewset action; its URL is the name with dashes (``return-to-service``)
    target: Lifecycle
    role: Role
    label: str  # a button's words

    @property
    def path(self) -> str:
        return self.name.replace("_", "-")

    @property
    def reason_required(self) -> bool:
        return self.target in REASON_REQUIRED


LIFECYCLE_ACTIONS: Final = (
    LifecycleAction("start_burn_in", Lifecycle.BURN_IN, Role.OPERATOR, "Start burn-in"),
    LifecycleAction("quarantine", Lifecycle.QUARANTINED, Role.OPERATOR, "Quarantine"),
    LifecycleAction("drain", Lifecycle.DRAINED, Role.OPERATOR, "Drain"),
    LifecycleAction("return_to_service", Lifecycle.IN_SERVICE, Role.OPERATOR, "Return to service"),
    LifecycleAction("retire", Lifecycle.RETIRED, Role.ADMIN, "Retire"),
)
ACTION_TO: Final = {action.target: action for action in LIFECYCLE_ACTIONS}
OUT_OF_SERVICE: Final = frozenset({Lifecycle.QUARANTINED, Lifecycle.DRAINED, Lifecycle.RETIRED})


def actions_for(role: str | None) -> tuple[LifecycleAction, ...]:
    """The actions ``role`` may take (an effective role; None: none)."""
    return tuple(action for action in LIFECYCLE_ACTIONS if role_rank(role) >= role_rank(action.role))


def moves_toward(target: str, current: str) -> tuple[Lifecycle, ...]:
    """The states that carry out advice to make a node ``target``, from ``current``, best first.

    - ``target`` itself, when the state machine allows it from ``current``.
    - Advice to take the node out of service (drain, quarantine) is done once the node is out of
      service; until then, the other way out stands in when ``target`` is not allowed.
    - Advice to burn the node in, from a state that cannot go straight to burn-in (in service):
      taking it out of service first.
    """
    target, current = Lifecycle(target), Lifecycle(current)
    allowed = LIFECYCLE_TRANSITIONS[current]
    if target == current:
        return ()
    if target in OUT_OF_SERVICE - {Lifecycle.RETIRED}:
        if current in OUT_OF_SERVICE:
            return ()
        candidates = (target, Lifecycle.QUARANTINED, Lifecycle.DRAINED)
    elif target == Lifecycle.BURN_IN and target not in allowed:
        candidates = (Lifecycle.DRAINED, Lifecycle.QUARANTINED)
    else:
        candidates = (target,)
    return tuple(dict.fromkeys(state for state in candidates if state in allowed))
