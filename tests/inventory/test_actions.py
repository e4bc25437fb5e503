"""apps/inventory/actions.py: the lifecycle actions and their roles (the API's and the pages'), and the
moves that carry out advice from each state."""

import pytest

from apps.accounts.roles import Role
from apps.inventory.actions import LIFECYCLE_ACTIONS, actions_for, moves_toward
from apps.inventory.api.views import NodeViewSet
from apps.inventory.choices import Lifecycle as L


def test_every_lifecycle_state_but_new_has_the_action_that_leads_there():
    assert {action.target for action in LIFECYCLE_ACTIONS} == set(L) - {L.NEW}


def test_the_api_has_one_action_per_entry_with_its_role():
    for action in LIFECYCLE_ACTIONS:
        assert callable(getattr(NodeViewSet, action.name))
        assert NodeViewSet.action_roles[action.name] == action.role


@pytest.mark.parametrize(
    ("role", "names"),
    [
        (None, []),
        (Role.VIEWER, []),
        (Role.OPERATOR, ["start_burn_in", "quarantine", "drain", "return_to_service"]),
        (Role.ADMIN, ["start_burn_in", "quarantine", "drain", "return_to_service", "retire"]),
    ],
)
def test_each_role_gets_the_actions_it_may_take(role, names):
    assert [action.name for action in actions_for(role)] == names


@pytest.mark.parametrize(
    ("target", "current", "moves"),
    [
        # Out of service: the advice's own move where allowed, the other way out where it is not.
        (L.DRAINED, L.IN_SERVICE, (L.DRAINED, L.QUARANTINED)),
        (L.DRAINED, L.BURN_IN, (L.DRAINED, L.QUARANTINED)),
        (L.DRAINED, L.NEW, (L.QUARANTINED,)),  # a new node cannot be drained
        (L.QUARANTINED, L.IN_SERVICE, (L.QUARANTINED, L.DRAINED)),
        (L.DRAINED, L.QUARANTINED, ()),  # already out of service
        (L.QUARANTINED, L.DRAINED, ()),
        (L.DRAINED, L.RETIRED, ()),
        # Burn-in: straight there where allowed, out of service first where not.
        (L.BURN_IN, L.NEW, (L.BURN_IN,)),
        (L.BURN_IN, L.QUARANTINED, (L.BURN_IN,)),
        (L.BURN_IN, L.IN_SERVICE, (L.DRAINED, L.QUARANTINED)),
        (L.BURN_IN, L.BURN_IN, ()),
        (L.BURN_IN, L.RETIRED, ()),
    ],
)
def test_moves_toward_advice_from_each_state(target, current, moves):
    assert moves_toward(target, current) == moves
