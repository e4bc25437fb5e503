"""Into service only on a burn-in passed since the node last left service (or was quarantined), or on
an admin's override with a reason, which the lifecycle history and the audit log record as one."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.inventory.choices import Lifecycle
from apps.inventory.models import BurnInResult, IllegalTransition, Node, NodeTransition
from tests import factories

pytestmark = pytest.mark.django_db


def new_node(hostname: str = "gpu-001") -> Node:
    return factories.node(factories.cluster(), factories.node_type(nics=0), hostname, lifecycle=Lifecycle.NEW)


def test_a_never_tested_node_cannot_go_new_quarantined_in_service(api_client):
    node = new_node()
    node.transition(Lifecycle.QUARANTINED, actor="t", reason="cabling check")

    response = api_client(Role.ADMIN).post(f"/api/v1/nodes/{node.pk}/return-to-service", {})

    assert response.status_code == 409
    assert response.json()["detail"].startswith("gpu-001 has not passed a burn-in since it was last taken out")
    assert "an admin may override with a reason" in response.json()["detail"]
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.QUARANTINED
    assert not NodeTransition.objects.filter(node=node, to_state=Lifecycle.IN_SERVICE).exists()


def test_burn_in_itself_ends_in_service_only_when_it_passed():
    node = new_node()
    node.transition(Lifecycle.BURN_IN, actor="t")
    BurnInResult.objects.record(node, passed=False, run="burn-in run #1", summary="gpu3: 12% below its siblings")
    with pytest.raises(IllegalTransition, match="has not passed a burn-in"):
        node.transition(Lifecycle.IN_SERVICE, actor="t")

    passed = factories.burn_in_pass(node, run="burn-in run #2")
    done = node.transition(Lifecycle.IN_SERVICE, actor="t")

    assert done.burn_in == passed
    assert done.burn_in_override is False


def test_a_pass_from_before_the_node_left_service_does_not_count():
    node = new_node()
    factories.burn_in_pass(node, run="burn-in run #1")
    node.transition(Lifecycle.BURN_IN, actor="t")
    node.transition(Lifecycle.IN_SERVICE, actor="t")
    node.transition(Lifecycle.DRAINED, actor="t", reason="PSU swap")

    with pytest.raises(IllegalTransition, match="since it was last taken out of service"):
        node.transition(Lifecycle.IN_SERVICE, actor="t")
    factories.burn_in_pass(node, run="burn-in run #2")
    assert node.transition(Lifecycle.IN_SERVICE, actor="t").burn_in.run == "burn-in run #2"


def test_a_pass_from_before_a_quarantine_does_not_count():
    node = new_node()
    BurnInResult.objects.record(
        node, passed=True, run="burn-in run #1", finished_at=timezone.now() - timedelta(hours=1)
    )
    node.transition(Lifecycle.QUARANTINED, actor="t", reason="XID 79 on gpu2")

    assert node.burn_in_evidence() is None
    with pytest.raises(IllegalTransition, match="has not passed a burn-in"):
        node.transition(Lifecycle.IN_SERVICE, actor="t")


def test_an_admin_overrides_with_a_reason_and_it_is_recorded_as_an_override(api_client):
    node = new_node()
    node.transition(Lifecycle.QUARANTINED, actor="t", reason="cabling check")

    response = api_client(Role.ADMIN).post(
        f"/api/v1/nodes/{node.pk}/return-to-service",
        {"override_burn_in": True, "reason": "vendor burn-in report #881 on file"},
        format="json",
    )

    assert response.status_code == 200, response.content
    assert response.json()["lifecycle"] == Lifecycle.IN_SERVICE
    done = NodeTransition.objects.get(node=node, to_state=Lifecycle.IN_SERVICE)
    assert (done.burn_in_override, done.burn_in_id, done.reason) == (True, None, "vendor burn-in report #881 on file")
    entry = AuditLogEntry.objects.get(action="node.burn_in_override")
    assert (entry.actor, entry.object_id, entry.status_code) == ("admin-user", str(node.pk), 200)
    assert entry.detail["reason"] == "vendor burn-in report #881 on file"
    history = api_client(Role.VIEWER).get(f"/api/v1/nodes/{node.pk}/history").json()
    assert history["results"][0]["burn_in_override"] is True


def test_an_override_needs_a_reason(api_client):
    node = new_node()
    node.transition(Lifecycle.QUARANTINED, actor="t", reason="cabling check")
    response = api_client(Role.ADMIN).post(
        f"/api/v1/nodes/{node.pk}/return-to-service", {"override_burn_in": True}, format="json"
    )
    assert response.status_code == 400  # a missing field, named
    assert response.json() == {"reason": ["A reason is required to put gpu-001 into service without a burn-in."]}
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.QUARANTINED


def test_only_an_admin_may_override(api_client):
    node = new_node()
    node.transition(Lifecycle.QUARANTINED, actor="t", reason="cabling check")
    response = api_client(Role.OPERATOR).post(
        f"/api/v1/nodes/{node.pk}/return-to-service", {"override_burn_in": True, "reason": "trust me"}, format="json"
    )
    assert response.status_code == 403
    assert "admin" in response.json()["detail"]
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.QUARANTINED
    assert AuditLogEntry.objects.get(action="node.return_to_service").status_code == 403


def test_an_override_on_another_move_is_a_400_naming_the_field(api_client):
    node = new_node()
    response = api_client(Role.ADMIN).post(
        f"/api/v1/nodes/{node.pk}/quarantine", {"override_burn_in": True, "reason": "x"}, format="json"
    )
    assert response.status_code == 400
    assert "override_burn_in" in response.json()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.NEW


def test_with_a_pass_an_operator_returns_the_node_and_the_history_names_the_burn_in(api_client):
    node = new_node()
    node.transition(Lifecycle.QUARANTINED, actor="t", reason="cabling check")
    passed = factories.burn_in_pass(node, run="burn-in run #7")
    assert node.service_refusal() is None

    response = api_client(Role.OPERATOR).post(f"/api/v1/nodes/{node.pk}/return-to-service", {})

    assert response.status_code == 200, response.content
    history = api_client(Role.VIEWER).get(f"/api/v1/nodes/{node.pk}/history").json()
    assert (history["results"][0]["burn_in"], history["results"][0]["burn_in_override"]) == (passed.pk, False)
    assert not AuditLogEntry.objects.filter(action="node.burn_in_override").exists()
