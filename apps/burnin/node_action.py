"""The node lifecycle action ``start_burn_in`` (``POST /api/v1/nodes/{id}/start-burn-in``, the node
page's button, a failure's "burn it in"): a real burn-in of the one node, started the one way every
burn-in starts (``starting.start_burn_in``), not only a change of its lifecycle state. Inventory owns
the action and sits below this app, so this app registers the performer when it starts (apps.py)."""

from datetime import timedelta
from typing import Any, Final

from django.utils import timezone

from apps.burnin.models import Suite
from apps.burnin.starting import CannotStart, start_burn_in
from apps.inventory.actions import InvalidOption, Move
from apps.inventory.models import IllegalTransition

DEFAULT_SUITE: Final = "quick"
DEADLINE: Final = timedelta(hours=6)  # as a burn-in started through the API without one


def start_node_burn_in(move: Move) -> dict[str, Any]:
    """Start a burn-in of ``move.node`` with the suite its options name (quick by default); the
    person's reason goes into the node's lifecycle history. Returns what the audit log adds."""
    name = move.options.get("suite") or DEFAULT_SUITE
    suite = Suite.objects.filter(name=name).first()
    if suite is None:
        names = ", ".join(Suite.objects.order_by("name").values_list("name", flat=True))
        raise InvalidOption("suite", f"No burn-in suite is named “{name}”: choose one of {names}.")
    try:
        burn_in = start_burn_in(
            [move.node],
            suite,
            actor=move.actor,
            user=move.user,
            deadline=timezone.now() + DEADLINE,
            note=move.reason,
        )
    except CannotStart as exc:  # the node's state does not allow it now: the action's 409
        raise IllegalTransition(str(exc)) from exc
    return {"burn_in": burn_in.pk, "run": burn_in.run_id, "suite": suite.name}
