"""POST /api/v1/failures/<id>/node-action: a failure's node quarantined, drained, burnt in or retired,
with the failure as the reason."""

import pytest

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.failures.events import record_event
from apps.inventory.choices import Lifecycle
from apps.inventory.models import NodeTransition
from tests.failures.conftest import xid

pytestmark = pytest.mark.django_db


@pytest.fixture
def failure(node):
    return record_event(node.pk, xid(79, gpu=6, data="GPU has fallen off the bus."))


def url(failure) -> str:
    return f"/api/v1/failures/{failure.pk}/node-action"


def test_an_operator_quarantines_the_node_with_the_failure_as_the_reason(api_client, failure):
    response = api_client(Role.OPERATOR).post(url(failure), {"action": "quarantine"})

    assert response.status_code == 200
    assert (response.json()["id"], response.json()["lifecycle"]) == (failure.node_id, "quarantined")
    change = NodeTransition.objects.get(node=failure.node, to_state=Lifecycle.QUARANTINED)
    reason = f"Failure #{failure.pk}: XID 79: GPU has fallen off the bus (GPU 6)"
    assert (change.actor, change.reason) == ("operator-user", reason)
    entry = AuditLogEntry.objects.get(action="node.quarantine")
    assert (entry.object_id, entry.status_code) == (str(failure.node_id), 200)
    moved = {"from_state": "in_service", "to_state": "quarantined"}
    assert entry.detail == {"reason": reason, **moved, "failure": failure.pk}


def test_a_note_follows_the_failure_in_the_reason(api_client, failure):
    api_client(Role.OPERATOR).post(url(failure), {"action": "drain", "note": "RMA ticket 4411"}, format="json")

    change = NodeTransition.objects.get(node=failure.node, to_state=Lifecycle.DRAINED)
    assert change.reason.endswith("(GPU 6): RMA ticket 4411")


def test_a_move_the_node_cannot_make_is_a_409_that_says_why(api_client, failure):
    failure.node.transition(Lifecycle.QUARANTINED, actor="alice", reason="first")

    response = api_client(Role.OPERATOR).post(url(failure), {"action": "quarantine"})

    assert response.status_code == 409
    assert "quarantined and cannot become quarantined" in response.json()["detail"]


def test_retiring_for_a_failure_needs_an_admin(api_client, failure):
    failure.node.transition(Lifecycle.QUARANTINED, actor="alice", reason="first")

    assert api_client(Role.OPERATOR).post(url(failure), {"action": "retire"}).status_code == 403
    assert api_client(Role.ADMIN).post(url(failure), {"action": "retire"}).json()["lifecycle"] == "retired"


@pytest.mark.parametrize("body", [{}, {"action": "return_to_service"}, {"action": "reboot"}])
def test_an_action_a_failure_cannot_be_the_reason_for_is_a_400_naming_the_field(api_client, failure, body):
    response = api_client(Role.OPERATOR).post(url(failure), body)

    assert response.status_code == 400
    assert "action" in response.json()
    assert not NodeTransition.objects.filter(node=failure.node).exists()


def test_the_failure_says_which_move_its_advice_calls_for(api_client, failure):
    body = api_client(Role.VIEWER).get(f"/api/v1/failures/{failure.pk}").json()

    assert body["recommended_move"] == "drained"
