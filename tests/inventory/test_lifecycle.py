"""Node lifecycle: the state machine, its history and its audit trail, through the API."""

import pytest

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.inventory.choices import Lifecycle
from apps.inventory.models import IllegalTransition, NodeTransition
from tests import factories

pytestmark = pytest.mark.django_db

# Who may move a node where, written out here rather than read from the table under test, so that a
# wrong entry there fails. Retired is final; a new node must pass burn-in before service.
LEGAL_TARGETS: dict[Lifecycle, set[Lifecycle]] = {
    Lifecycle.NEW: {Lifecycle.BURN_IN, Lifecycle.QUARANTINED, Lifecycle.RETIRED},
    Lifecycle.BURN_IN: {Lifecycle.IN_SERVICE, Lifecycle.QUARANTINED, Lifecycle.DRAINED},
    Lifecycle.IN_SERVICE: {Lifecycle.QUARANTINED, Lifecycle.DRAINED},
    Lifecycle.QUARANTINED: {Lifecycle.IN_SERVICE, Lifecycle.BURN_IN, Lifecycle.DRAINED, Lifecycle.RETIRED},
    Lifecycle.DRAINED: {Lifecycle.IN_SERVICE, Lifecycle.BURN_IN, Lifecycle.QUARANTINED, Lifecycle.RETIRED},
    Lifecycle.RETIRED: set(),
}
MOVES = [(start, target) for start in Lifecycle for target in Lifecycle]
LEGAL_MOVES = [(start, target) for start, target in MOVES if target in LEGAL_TARGETS[start]]
ILLEGAL_MOVES = [(start, target) for start, target in MOVES if target not in LEGAL_TARGETS[start]]


def move_id(move: tuple[Lifecycle, Lifecycle]) -> str:
    return f"{move[0].value}->{move[1].value}"


ACTION_TARGET = {
    "start-burn-in": Lifecycle.BURN_IN,
    "quarantine": Lifecycle.QUARANTINED,
    "drain": Lifecycle.DRAINED,
    "return-to-service": Lifecycle.IN_SERVICE,
    "retire": Lifecycle.RETIRED,
}


@pytest.fixture
def node():
    return factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-001", lifecycle=Lifecycle.IN_SERVICE)


def test_it_quarantines_with_a_reason_and_keeps_history(api_client, node):
    response = api_client(Role.OPERATOR).post(f"/api/v1/nodes/{node.pk}/quarantine", {"reason": "XID 79 on gpu3"})
    assert response.status_code == 200, response.content
    assert response.json()["lifecycle"] == Lifecycle.QUARANTINED
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.QUARANTINED
    transition = NodeTransition.objects.get(node=node)
    assert (transition.from_state, transition.to_state) == (Lifecycle.IN_SERVICE, Lifecycle.QUARANTINED)
    assert transition.actor == "operator-user"
    assert transition.reason == "XID 79 on gpu3"
    entry = AuditLogEntry.objects.get(action="node.quarantine")
    assert entry.actor == "operator-user"
    assert entry.object_id == str(node.pk)
    assert entry.status_code == 200
    assert entry.detail["reason"] == "XID 79 on gpu3"


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}], ids=["missing", "empty", "blank"])
def test_it_requires_a_reason_to_take_a_node_out_of_service(api_client, node, body):
    response = api_client(Role.OPERATOR).post(f"/api/v1/nodes/{node.pk}/drain", body)
    assert response.status_code == 400
    assert list(response.json()) == ["reason"]
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.IN_SERVICE
    assert not NodeTransition.objects.exists()
    # The refused attempt is audited as what it tried.
    assert AuditLogEntry.objects.get(action="node.drain").status_code == 400


def test_an_illegal_move_is_a_conflict_even_without_a_reason(api_client, node):
    node.transition(Lifecycle.QUARANTINED, actor="t", reason="r")
    node.transition(Lifecycle.RETIRED, actor="t", reason="RMA")
    response = api_client(Role.OPERATOR).post(f"/api/v1/nodes/{node.pk}/drain", {})
    assert response.status_code == 409
    assert "cannot become drained" in response.json()["detail"]


def test_it_refuses_an_illegal_transition_with_a_clear_message(api_client, node):
    node.transition(Lifecycle.QUARANTINED, actor="t", reason="r")
    node.transition(Lifecycle.RETIRED, actor="t", reason="RMA")
    response = api_client(Role.ADMIN).post(f"/api/v1/nodes/{node.pk}/return-to-service", {})
    assert response.status_code == 409
    assert response.json()["detail"] == (
        "gpu-001 is retired and cannot become in service; from retired it can become: nothing (final state)."
    )
    # The refused attempt is audited too.
    assert AuditLogEntry.objects.get(action="node.return_to_service").status_code == 409


def test_it_lists_the_allowed_targets_when_refusing(node):
    node.lifecycle = Lifecycle.NEW
    with pytest.raises(IllegalTransition, match="from new it can become: burn-in, quarantined, retired"):
        node.transition(Lifecycle.IN_SERVICE, actor="t")


@pytest.mark.parametrize(("start", "target"), LEGAL_MOVES, ids=map(move_id, LEGAL_MOVES))
def test_it_allows_every_legal_transition(start, target):
    n = factories.node(factories.cluster(), factories.node_type(nics=0), lifecycle=start)
    factories.burn_in_pass(n)  # into service needs one (tests/inventory/test_burn_in_gate.py)
    n.transition(target, actor="tester", reason="because")
    n.refresh_from_db()
    assert n.lifecycle == target
    assert list(NodeTransition.objects.filter(node=n).values_list("from_state", "to_state")) == [(start, target)]


@pytest.mark.parametrize(("start", "target"), ILLEGAL_MOVES, ids=map(move_id, ILLEGAL_MOVES))
def test_it_refuses_every_illegal_transition(start, target):
    n = factories.node(factories.cluster(), factories.node_type(nics=0), lifecycle=start)
    with pytest.raises(IllegalTransition):
        n.transition(target, actor="tester", reason="because")
    n.refresh_from_db()
    assert n.lifecycle == start
    assert not NodeTransition.objects.filter(node=n).exists()


@pytest.mark.parametrize("start", list(Lifecycle), ids=lambda state: state.value)
def test_a_node_offers_exactly_its_legal_targets(start):
    n = factories.node(factories.cluster(), factories.node_type(nics=0), lifecycle=start)
    assert n.allowed_transitions() == LEGAL_TARGETS[start]


def test_a_stale_copy_cannot_overwrite_a_newer_state(node):
    stale = type(node).objects.get(pk=node.pk)
    node.transition(Lifecycle.QUARANTINED, actor="a", reason="first")
    with pytest.raises(IllegalTransition, match="changed state while this request was in flight"):
        stale.transition(Lifecycle.DRAINED, actor="b", reason="second")
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.QUARANTINED
    assert NodeTransition.objects.count() == 1


def test_history_endpoint_lists_transitions_newest_first(api_client, node):
    node.transition(Lifecycle.QUARANTINED, actor="alice", reason="ECC")
    node.transition(Lifecycle.BURN_IN, actor="bob", reason="after GPU swap")
    response = api_client(Role.VIEWER).get(f"/api/v1/nodes/{node.pk}/history")
    assert response.status_code == 200
    assert response.json()["count"] == 2
    assert [(t["to_state"], t["actor"]) for t in response.json()["results"]] == [
        (Lifecycle.BURN_IN, "bob"),
        (Lifecycle.QUARANTINED, "alice"),
    ]


def test_lifecycle_cannot_be_patched_directly(api_client, node):
    response = api_client(Role.ADMIN).patch(f"/api/v1/nodes/{node.pk}", {"lifecycle": "retired"})
    assert response.status_code == 400
    assert "lifecycle actions" in str(response.json()["lifecycle"])
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.IN_SERVICE


@pytest.mark.parametrize("action", sorted(ACTION_TARGET))
def test_viewers_cannot_change_lifecycle(api_client, node, action):
    response = api_client(Role.VIEWER).post(f"/api/v1/nodes/{node.pk}/{action}", {"reason": "x"})
    assert response.status_code == 403
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.IN_SERVICE


def test_retire_needs_an_admin(api_client, node):
    node.transition(Lifecycle.DRAINED, actor="t", reason="r")
    assert api_client(Role.OPERATOR).post(f"/api/v1/nodes/{node.pk}/retire", {"reason": "EOL"}).status_code == 403
    assert api_client(Role.ADMIN).post(f"/api/v1/nodes/{node.pk}/retire", {"reason": "EOL"}).status_code == 200


def test_creating_a_node_records_its_initial_state(admin_api):
    c, nt = factories.cluster(), factories.node_type(nics=2)
    response = admin_api.post(
        "/api/v1/nodes", {"hostname": "gpu-new", "cluster": c.pk, "node_type": nt.pk, "lifecycle": "new"}
    )
    assert response.status_code == 201, response.content
    node_id = response.json()["id"]
    assert list(NodeTransition.objects.filter(node_id=node_id).values_list("from_state", "to_state")) == [("", "new")]
    # Ports come from the node type's templates.
    assert response.json()["gpu_count"] == 0
    assert sorted(
        admin_api.get(f"/api/v1/network-ports?node={node_id}").json()["results"][i]["device_name"] for i in range(2)
    ) == [
        "mlx5_0",
        "mlx5_1",
    ]
