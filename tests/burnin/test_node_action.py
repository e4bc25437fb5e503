"""The node lifecycle action start-burn-in starts a real burn-in (``starting.start_burn_in``, as
``POST /api/v1/burn-ins`` does), not only a change of state: from the node's action and from a
failure's, with the quick suite unless another is named, audited with the burn-in it started."""

import pytest

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.burnin.models import BurnIn
from apps.failures.events import record_event
from apps.inventory.choices import Lifecycle
from apps.inventory.models import NodeTransition
from tests import factories
from tests.burnin.conftest import suite
from tests.failures.conftest import xid

pytestmark = pytest.mark.django_db


@pytest.fixture
def node():
    suite("quick"), suite("standard")
    return factories.node(factories.cluster(), factories.node_type(nics=1), "gpu-001", lifecycle=Lifecycle.DRAINED)


def start(api_client, node, body=None, role=Role.OPERATOR):
    return api_client(role).post(f"/api/v1/nodes/{node.pk}/start-burn-in", body or {}, format="json")


def test_the_node_action_starts_a_quick_burn_in_of_the_node_and_audits_it(api_client, node):
    answer = start(api_client, node, {"reason": "new DIMMs"})

    assert answer.status_code == 200, answer.content
    assert answer.json()["lifecycle"] == Lifecycle.BURN_IN
    burn_in = BurnIn.objects.get()
    assert (burn_in.suite.name, list(burn_in.nodes.values_list("node", flat=True))) == ("quick", [node.pk])
    assert burn_in.run.commands.count() == len(suite("quick").steps)
    change = NodeTransition.objects.get(node=node, to_state=Lifecycle.BURN_IN)
    assert change.reason == f"{burn_in} started by operator-user: new DIMMs"
    entry = AuditLogEntry.objects.get(action="node.start_burn_in")
    assert entry.detail | {"burn_in": burn_in.pk, "run": burn_in.run_id, "suite": "quick"} == entry.detail


def test_the_node_action_runs_the_suite_it_names(api_client, node):
    assert start(api_client, node, {"suite": "standard"}).status_code == 200
    assert BurnIn.objects.get().suite.name == "standard"


def test_an_unknown_suite_is_a_400_naming_the_suites_and_nothing_starts(api_client, node):
    answer = start(api_client, node, {"suite": "nope"})

    assert answer.status_code == 400
    assert "No burn-in suite is named “nope”" in answer.json()["suite"][0]
    assert not BurnIn.objects.exists()
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.DRAINED


def test_a_node_in_service_is_refused_with_the_reason(api_client, node):
    node.transition(Lifecycle.IN_SERVICE, actor="t", reason="r", override_burn_in=True)

    answer = start(api_client, node)

    assert answer.status_code == 409
    assert answer.json()["detail"] == "gpu-001 is in service: drain it first."
    assert not BurnIn.objects.exists()


def test_only_starting_a_burn_in_takes_a_suite(api_client, node):
    answer = api_client(Role.OPERATOR).post(
        f"/api/v1/nodes/{node.pk}/quarantine", {"reason": "x", "suite": "quick"}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["suite"] == ["Quarantine takes no suite."]


def test_viewers_start_nothing(api_client, node):
    assert start(api_client, node, role=Role.VIEWER).status_code == 403
    assert not BurnIn.objects.exists()


def test_burning_in_a_failures_node_starts_a_burn_in_with_the_failure_as_the_reason(api_client, node):
    failure = record_event(node.pk, xid(79, gpu=6, data="GPU has fallen off the bus."))

    answer = api_client(Role.OPERATOR).post(f"/api/v1/failures/{failure.pk}/node-action", {"action": "start_burn_in"})

    assert answer.status_code == 200, answer.content
    burn_in = BurnIn.objects.get()
    change = NodeTransition.objects.get(node=node, to_state=Lifecycle.BURN_IN)
    assert change.reason.startswith(f"{burn_in} started by operator-user: Failure #{failure.pk}: XID 79")
    entry = AuditLogEntry.objects.get(action="node.start_burn_in")
    assert (entry.detail["failure"], entry.detail["burn_in"]) == (failure.pk, burn_in.pk)
