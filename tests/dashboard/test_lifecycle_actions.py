"""What the pages offer to change a node's lifecycle, as the server renders them: every move the REST
API allows, to the roles allowed to make it, and on each failure the moves that carry out its advice
from the node's state now, with the failure as the reason."""

import json
import re

import pytest
from django.test import Client

from apps.accounts.models import User
from apps.accounts.roles import Role
from apps.failures.conditions import STRAGGLER, Observation, xid_condition
from apps.failures.models import Failure
from apps.failures.recording import raise_failure
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node
from tests import factories

pytestmark = pytest.mark.django_db


def signed_in(role: str) -> Client:
    client = Client()
    client.force_login(User.objects.create_user(f"{role}-moves", role=role))
    return client


def node_with_xid79(lifecycle: str) -> tuple[Node, Failure]:
    node = factories.node(factories.cluster(), factories.node_type(), "gpu-new", lifecycle=lifecycle)
    failure = raise_failure(Observation(node.pk, node.created_at, xid_condition(79), gpu_index=6, xid=79), actor="t")
    return node, failure


def buttons(html: str, attribute: str) -> list[str]:
    return re.findall(rf'<button type="button" {attribute}="([a-z_]+)"', html)


def failure_moves(html: str) -> str:
    match = re.search(r'<div class="failure-moves".*?</div>', html, re.S)
    return match.group(0) if match else ""


@pytest.mark.parametrize(
    ("role", "actions"),
    [
        (Role.VIEWER, []),
        (Role.OPERATOR, ["start_burn_in", "quarantine", "drain", "return_to_service"]),
        (Role.ADMIN, ["start_burn_in", "quarantine", "drain", "return_to_service", "retire"]),
    ],
)
def test_the_node_page_and_the_bulk_bar_offer_every_move_the_role_may_make(role, actions):
    node, _ = node_with_xid79(Lifecycle.NEW)
    client = signed_in(role)

    assert buttons(client.get(f"/nodes/{node.pk}/").content.decode(), "data-action") == actions
    listing = client.get("/nodes/").content.decode()
    # In bulk, a burn-in is one burn-in of every node selected, started from the burn-in form.
    assert buttons(listing, "data-action") == [action for action in actions if action != "start_burn_in"]
    assert ('id="burn-in-selected"' in listing) == ("start_burn_in" in actions)
    assert ('id="burn-in-dialog"' in listing) == ("start_burn_in" in actions)


def test_only_the_moves_allowed_from_the_nodes_state_are_shown():
    node, _ = node_with_xid79(Lifecycle.NEW)

    page = signed_in(Role.ADMIN).get(f"/nodes/{node.pk}/").content.decode()

    shown = re.findall(r'<button type="button" data-action="([a-z_]+)"(?![^>]* hidden)', page)
    assert shown == ["start_burn_in", "quarantine", "retire"]  # from new: no drain, no service


def test_advice_to_drain_a_new_node_offers_quarantine_and_says_why():
    node, _ = node_with_xid79(Lifecycle.NEW)

    client = signed_in(Role.OPERATOR)
    for path in (f"/nodes/{node.pk}/", "/failures/"):
        moves = failure_moves(client.get(path).content.decode())
        assert buttons(moves, "data-node-action") == ["quarantine"], path
        assert "From new a node cannot be drained; quarantine keeps it out of service just the same." in moves
        assert "Quarantine for this failure" in moves


def test_advice_to_drain_a_node_in_service_offers_drain_first_then_quarantine():
    node, _ = node_with_xid79(Lifecycle.IN_SERVICE)

    moves = failure_moves(signed_in(Role.OPERATOR).get(f"/nodes/{node.pk}/").content.decode())

    assert buttons(moves, "data-node-action") == ["drain", "quarantine"]
    assert "move-note" not in moves


def test_advice_already_followed_says_so_and_still_offers_quarantine():
    node_with_xid79(Lifecycle.DRAINED)

    moves = failure_moves(signed_in(Role.OPERATOR).get("/failures/").content.decode())

    assert buttons(moves, "data-node-action") == ["quarantine"]
    assert "Done: the node is drained." in moves


def test_a_straggler_in_service_is_taken_out_of_service_before_its_burn_in():
    node = factories.node(factories.cluster(), factories.node_type(), "gpu-slow")
    raise_failure(Observation(node.pk, node.created_at, STRAGGLER, gpu_index=2), actor="t")

    moves = failure_moves(signed_in(Role.OPERATOR).get(f"/nodes/{node.pk}/").content.decode())

    assert buttons(moves, "data-node-action") == ["drain", "quarantine"]
    assert "a node goes to burn-in once out of service: drain or quarantine first." in moves


def test_viewers_read_the_note_but_get_no_buttons():
    node, _ = node_with_xid79(Lifecycle.NEW)

    moves = failure_moves(signed_in(Role.VIEWER).get(f"/nodes/{node.pk}/").content.decode())

    assert "cannot be drained" in moves
    assert "<button" not in moves


def test_the_node_pages_script_gets_the_same_moves_for_every_state():
    node, _ = node_with_xid79(Lifecycle.NEW)

    page = signed_in(Role.OPERATOR).get(f"/nodes/{node.pk}/").content.decode()

    data = json.loads(re.search(r'<script id="node-page" type="application/json">(.*?)</script>', page).group(1))
    assert data["failure_moves"]["drained"]["new"]["actions"] == ["quarantine"]
    assert data["failure_moves"]["drained"]["in_service"] == {"actions": ["drain", "quarantine"], "note": ""}
    assert data["failure_moves"][""]["in_service"] == {"actions": ["quarantine"], "note": ""}
    assert data["failure_moves"]["burn_in"]["quarantined"]["actions"] == ["start_burn_in"]
