"""The lifecycle actions people take on a node, and the role each needs.

The REST API's ``POST /api/v1/nodes/<id>/<path>`` actions (apps/inventory/api/views.py) and the
dashboard's buttons are both made from ``LIFECYCLE_ACTIONS``, so the pages offer every move the API
allows, to the roles allowed to make it, and nothing else. Whether a move is allowed from a node's
state is the state machine's call (``LIFECYCLE_TRANSITIONS``, ``Node.transition``).

``moves_toward`` turns advice ("drain the node", "burn it in") into the moves that carry it out from
the state a node is in now: a node that is new cannot be drained, but quarantining it keeps it out
of service just the same.

A move that is more than a change of state is made by the app that owns it: starting a burn-in
writes a burn-in and launches its run (apps/burnin registers ``start_burn_in`` with ``performs``
when it starts), so the node action, the failure's node action and ``POST /api/v1/burn-ins`` are
one code path. Inventory sits below burn-in and cannot import it; the registration points up.
"""

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from django.core.exceptions import ImproperlyConfigured

from apps.accounts.roles import Role, role_rank
from apps.inventory.choices import Lifecycle
from apps.inventory.models.nodes import LIFECYCLE_TRANSITIONS, REASON_REQUIRED

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser

    from apps.inventory.models import Node


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

    @property
    def performed_elsewhere(self) -> bool:
        """Made by a higher app's performer, not by a change of state alone."""
        return self.name in PERFORMED_ELSEWHERE


LIFECYCLE_ACTIONS: Final = (
    LifecycleAction("start_burn_in", Lifecycle.BURN_IN, Role.OPERATOR, "Start burn-in"),
    LifecycleAction("quarantine", Lifecycle.QUARANTINED, Role.OPERATOR, "Quarantine"),
    LifecycleAction("drain", Lifecycle.DRAINED, Role.OPERATOR, "Drain"),
    LifecycleAction("return_to_service", Lifecycle.IN_SERVICE, Role.OPERATOR, "Return to service"),
    LifecycleAction("retire", Lifecycle.RETIRED, Role.ADMIN, "Retire"),
)
ACTION_TO: Final = {action.target: action for action in LIFECYCLE_ACTIONS}
OUT_OF_SERVICE: Final = frozenset({Lifecycle.QUARANTINED, Lifecycle.DRAINED, Lifecycle.RETIRED})
PERFORMED_ELSEWHERE: Final = frozenset({"start_burn_in"})  # a burn-in, not just its lifecycle state


class Move(NamedTuple):
    """A person's lifecycle action on a node, as a performer gets it."""

    node: "Node"
    actor: str
    user: "AbstractBaseUser | None"
    reason: str
    options: Mapping[str, Any]  # the action's own fields (a burn-in's ``suite``)


class InvalidOption(ValueError):
    """An option of the move that is wrong (an unknown suite): a 400 naming ``field``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


# A performer makes the move and returns what the audit log should add (the burn-in it started); it
# raises IllegalTransition when the node cannot make it now, InvalidOption for a wrong option.
Performer = Callable[[Move], dict[str, Any]]
_PERFORMERS: dict[str, Performer] = {}


def performs(name: str, performer: Performer) -> None:
    """Make ``performer`` the way the action ``name`` is carried out (called by the owning app's ready)."""
    if name not in PERFORMED_ELSEWHERE:
        raise ImproperlyConfigured(f"{name} is a change of state: nothing else performs it.")
    _PERFORMERS[name] = performer


def carry_out(action: LifecycleAction, move: Move, *, override_burn_in: bool = False) -> dict[str, Any]:
    """Make ``move``: by its action's performer, or as a change of state. Returns the audit detail."""
    if action.performed_elsewhere:
        performer = _PERFORMERS.get(action.name)
        if performer is None:  # never silently only the state: that would be a burn-in that never runs
            raise ImproperlyConfigured(f"Nothing performs {action.name}: is its app installed?")
        return performer(move)
    if move.options:
        field = next(iter(move.options))
        raise InvalidOption(field, f"{action.label} takes no {field}.")
    done = move.node.transition(
        action.target, actor=move.actor, user=move.user, reason=move.reason, override_burn_in=override_burn_in
    )
    return {"burn_in_override": True} if done.burn_in_override else {}


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
