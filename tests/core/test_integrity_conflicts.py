"""A database refusal the serializers could not foresee (two writers racing) is a 409 that says
which fields conflict, in words: never the database's message, which goes to the log."""

import logging
from unittest import mock

import pytest
from django.db import IntegrityError, connection, transaction

from apps.accounts.models import AuditLogEntry
from apps.core import integrity
from apps.inventory.api.serializers import ClusterSerializer
from apps.inventory.models import Cluster, Fabric, Gpu, Node
from tests import factories

pytestmark = pytest.mark.django_db

LEAKS = ("inventory_", "constraint", "DETAIL", "violates", "failed")  # tables, SQL words, the driver's phrasing


def refusal(write) -> IntegrityError:
    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        write()
    return refused.value


@pytest.fixture
def node() -> Node:
    return factories.node(factories.cluster(), factories.node_type(nics=0, gpus=1), "gpu-x")


def test_a_taken_unique_value_is_named_by_its_field(node):
    exc = refusal(lambda: Node.objects.create(hostname="gpu-x", cluster=node.cluster, node_type=node.node_type))

    assert integrity.explain(exc) == integrity.Refusal(integrity.UNIQUE, Node, ("hostname",))
    assert integrity.explain(exc).message() == "Another node already has this hostname."


def test_a_taken_unique_constraint_is_named_by_its_fields(node):
    exc = refusal(lambda: Gpu.objects.create(node=node, index=0, uuid=factories.gpu_uuid()))

    assert integrity.explain(exc).message() == "Another GPU already has this node and index."


def test_a_broken_check_names_the_fields_its_condition_reads(node):
    exc = refusal(
        lambda: Fabric.objects.create(
            name="f", cluster=node.cluster, kind="infiniband", topology="fat_tree", oversubscription_ratio=0.5
        )
    )

    assert integrity.explain(exc).message() == (
        "The change breaks a rule on oversubscription_ratio that every fabric must keep."
    )


def test_an_empty_required_column_is_named(node):
    exc = refusal(lambda: Node.objects.filter(pk=node.pk).update(serial=None))

    assert integrity.explain(exc).message() == "The node's serial may not be empty."


@pytest.mark.django_db(transaction=True)  # SQLite checks foreign keys when the transaction commits
def test_a_reference_to_a_missing_row_names_the_field_where_the_database_says():
    node_type = factories.node_type(nics=0, gpus=0)

    exc = refusal(lambda: Node.objects.create(hostname="gpu-y", cluster_id=999_999, node_type=node_type))

    expected = "cluster" if connection.vendor == "postgresql" else "row"  # SQLite does not say which
    assert integrity.explain(exc).message() == (
        f"The change refers to a {expected} that does not exist (it may just have been deleted)."
    )


def test_an_integrity_error_the_database_did_not_explain_gets_a_generic_message():
    message = integrity.explain(IntegrityError("something")).message()

    assert message == "The database refused the change as conflicting with the stored data."


def test_the_api_answers_a_race_it_lost_with_a_409_naming_the_field_and_logs_the_database(admin_api, caplog):
    validate = ClusterSerializer.validate

    def validate_then_lose_the_race(serializer, attrs):
        attrs = validate(serializer, attrs)
        Cluster.objects.create(name=attrs["name"])  # another writer, between our check and our write
        return attrs

    with (
        mock.patch.object(ClusterSerializer, "validate", validate_then_lose_the_race),
        caplog.at_level(logging.WARNING, logger="apps.core.api.exceptions"),
    ):
        response = admin_api.post("/api/v1/clusters", {"name": "prod"})

    assert response.status_code == 409
    assert response.json() == {"detail": "Another cluster already has this name."}
    assert not any(word in response.content.decode() for word in LEAKS)
    assert Cluster.objects.filter(name="prod").count() == 1  # the other writer's; ours wrote nothing
    assert AuditLogEntry.objects.get(status_code=409).action == "POST /api/v1/clusters"  # the refusal is audited
    (logged,) = [record for record in caplog.records if record.name == "apps.core.api.exceptions"]
    assert "ClusterViewSet" in logged.getMessage()
    assert "inventory_cluster" in logged.getMessage()  # the database's own words, for the operator
