"""Bringing a node into the inventory: one model-level way (Node.objects.create_new) for the API, an
agent's enrollment and an inventory import, which writes the node, its node type's ports and the
first row of its lifecycle history together."""

from datetime import UTC, datetime
from unittest import mock

import pytest
from django.db import DatabaseError

from apps.accounts.models import AuditLogEntry
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node, NodeTransition
from tests import factories

pytestmark = pytest.mark.django_db


def test_it_writes_the_node_its_ports_and_the_first_history_row():
    cluster, node_type = factories.cluster(), factories.node_type(nics=2)
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    node = Node.objects.create_new(
        Node(hostname="gpu-new", cluster=cluster, node_type=node_type, lifecycle=Lifecycle.BURN_IN),
        actor="system:test",
        reason="racked today",
        at=at,
    )

    assert Node.objects.get(pk=node.pk).lifecycle == Lifecycle.BURN_IN
    assert sorted(node.ports.values_list("device_name", flat=True)) == ["mlx5_0", "mlx5_1"]
    history = list(node.transitions.values_list("from_state", "to_state", "actor", "reason", "at"))
    assert history == [("", Lifecycle.BURN_IN, "system:test", "racked today", at)]


def test_a_history_that_cannot_be_written_leaves_no_node():
    cluster, node_type = factories.cluster(), factories.node_type(nics=2)

    with (
        mock.patch.object(NodeTransition.objects, "create", side_effect=DatabaseError("disk full")),
        pytest.raises(DatabaseError),
    ):
        Node.objects.create_new(
            Node(hostname="gpu-new", cluster=cluster, node_type=node_type), actor="system:test", reason="r"
        )

    assert not Node.objects.filter(hostname="gpu-new").exists()
    assert not NodeTransition.objects.exists()


def test_a_node_created_through_the_api_has_its_creator_in_its_history_and_the_audit_log(admin_api):
    cluster, node_type = factories.cluster(), factories.node_type(nics=0)

    response = admin_api.post(
        "/api/v1/nodes", {"hostname": "gpu-api", "cluster": cluster.pk, "node_type": node_type.pk, "lifecycle": "new"}
    )

    assert response.status_code == 201, response.content
    transition = NodeTransition.objects.get(node_id=response.json()["id"])
    assert (transition.from_state, transition.to_state) == ("", Lifecycle.NEW)
    assert (transition.actor, transition.user.username, transition.reason) == (
        "admin-user",
        "admin-user",
        "created through the API",
    )
    entry = AuditLogEntry.objects.get(action="node.create")
    assert (entry.actor, entry.object_id, entry.status_code) == ("admin-user", str(response.json()["id"]), 201)
