"""Lifecycle changes in real headless Chromium: every move the API allows offered to the roles that may
make it (burn-in, bulk drain, retire), a failure's one-click moves with the failure as the reason, and a
node page's "since" and lifecycle history kept live after a change, the user's own included."""

import pytest
from playwright.sync_api import expect

from apps.accounts.models import User
from apps.burnin.models import BurnIn
from apps.failures.conditions import Observation, xid_condition
from apps.failures.recording import raise_failure
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node, NodeTransition
from tests import factories
from tests.burnin.conftest import suite
from tests.dashboard.conftest import node_action, off_the_loop, screenshot
from tests.dashboard.node_data import node_with_history
from tests.dashboard.test_pages_nodes import small_fleet, wait_until_live

pytestmark = pytest.mark.browser


def new_node_with_xid79() -> Node:
    node = factories.node(factories.cluster(), factories.node_type(), "gpu-fresh", lifecycle=Lifecycle.NEW)
    raise_failure(Observation(node.pk, node.created_at, xid_condition(79), gpu_index=6, xid=79), actor="test")
    return node


def test_one_click_on_a_failure_drains_its_node_and_both_pages_show_since_and_history_live(open_page, operator, viewer):
    node = off_the_loop(node_with_history, transitions=0)
    watcher = open_page(viewer, f"/nodes/{node.pk}/")
    wait_until_live(watcher)
    page = open_page(operator, f"/nodes/{node.pk}/")
    wait_until_live(page)
    expect(page.locator("#lifecycle-since dt")).to_have_text("In service since")

    xid = page.locator("#active-failures tr", has_text="XID 79")
    xid.get_by_role("button", name="Drain for this failure").click()

    for seen in (page, watcher):  # the user's own page, and another one, without reloading
        expect(seen.locator("#node-lifecycle")).to_have_text("Drained")
        expect(seen.locator("#lifecycle-since dt")).to_have_text("Drained since")
        newest = seen.locator("#lifecycle-history tbody tr").first
        expect(newest).to_contain_text("In service → Drained")
        expect(newest).to_contain_text("Failure #")
        expect(newest).to_contain_text("XID 79: GPU has fallen off the bus (GPU 0)")
    expect(xid.locator(".move-note")).to_have_text("Done: the node is drained.")
    expect(xid.get_by_role("button", name="Drain for this failure")).to_have_count(0)
    change = NodeTransition.objects.get(node=node, to_state=Lifecycle.DRAINED)
    assert change.actor == "otto"
    assert change.reason.endswith("XID 79: GPU has fallen off the bus (GPU 0)")


def test_a_new_node_is_quarantined_for_its_failure_from_the_failures_page(open_page, operator):
    node = off_the_loop(new_node_with_xid79)
    page = open_page(operator, "/failures/")
    card = page.locator("#failure-list li", has_text="XID 79")
    expect(card.locator(".move-note")).to_contain_text("From new a node cannot be drained")
    screenshot(page, "failures-moves")

    card.get_by_role("button", name="Quarantine for this failure").click()

    expect(page.locator("#toast")).to_contain_text("gpu-fresh is now quarantined")
    expect(card.locator(".move-note")).to_have_text("Done: the node is quarantined.")
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.QUARANTINED


def test_burn_in_and_retire_are_offered_to_those_who_may_and_drain_works_in_bulk(open_page, operator):
    nodes = off_the_loop(small_fleet, 4)
    fresh = off_the_loop(new_node_with_xid79)
    off_the_loop(suite, "quick")  # the node action starts a real burn-in of it

    page = open_page(operator, f"/nodes/{fresh.pk}/")
    expect(page.locator('#node-actions [data-action="retire"]')).to_have_count(0)  # an admin's call
    page.locator('#node-actions [data-action="start_burn_in"]').click()  # the burn-in form, on this node
    expect(page.locator("#burn-in-names")).to_have_text("gpu-fresh")
    page.locator("#burn-in-start").click()
    expect(page.locator("h1")).to_contain_text("burn-in: Quick")  # its run's page
    assert off_the_loop(lambda: list(BurnIn.objects.values_list("nodes__node", "suite__name"))) == [(fresh.pk, "quick")]
    assert off_the_loop(lambda: Node.objects.get(pk=fresh.pk).lifecycle) == Lifecycle.BURN_IN

    listing = open_page(operator, "/nodes/")
    wait_until_live(listing)
    for node in nodes[:2]:
        listing.get_by_label(f"Select {node.hostname}").check()
    listing.locator('#bulk-bar [data-action="drain"]').click()
    listing.locator("#action-reason").fill("Rack A4 PDU maintenance")
    listing.locator("#action-confirm").click()
    expect(listing.locator("#action-results li.ok")).to_have_count(2)
    drained = Node.objects.filter(lifecycle=Lifecycle.DRAINED).values_list("pk", flat=True)
    assert set(drained) == {node.pk for node in nodes[:2]}

    admin = User.objects.create_user("ada", password="unused-password-3", role="admin")
    retiring = open_page(admin, f"/nodes/{nodes[0].pk}/")
    node_action(retiring, "retire", "Board replaced under RMA 7781")
    expect(retiring.locator("#node-lifecycle")).to_have_text("Retired")
    expect(retiring.locator("#no-actions")).to_be_visible()


def test_a_change_made_elsewhere_reaches_since_and_history_of_an_open_node_page(open_page, viewer):
    node = off_the_loop(node_with_history, transitions=0)
    page = open_page(viewer, f"/nodes/{node.pk}/")
    wait_until_live(page)

    off_the_loop(node.transition, Lifecycle.QUARANTINED, actor="cli-bot", reason="ECC storm on GPU 3")

    expect(page.locator("#node-lifecycle")).to_have_text("Quarantined")
    expect(page.locator("#lifecycle-since dt")).to_have_text("Quarantined since")
    newest = page.locator("#lifecycle-history tbody tr").first
    expect(newest).to_contain_text("cli-bot")
    expect(newest).to_contain_text("ECC storm on GPU 3")


def test_an_admin_returns_a_node_to_service_without_a_burn_in_only_by_overriding_with_a_reason(open_page, operator):
    node = off_the_loop(node_with_history, transitions=1)  # quarantined, never burnt in since
    open_page.expect_console_error("status of 409")  # the operator's refusal, shown to them
    page = open_page(operator, f"/nodes/{node.pk}/")
    page.locator('#node-actions [data-action="return_to_service"]').click()
    expect(page.locator("#action-override-label")).to_be_hidden()  # an admin's call
    page.locator("#action-confirm").click()
    expect(page.locator("#action-results li.refused")).to_contain_text("burn-in")

    admin = User.objects.create_user("ada", password="unused-password-3", role="admin")
    page = open_page(admin, f"/nodes/{node.pk}/")
    page.locator('#node-actions [data-action="return_to_service"]').click()
    page.locator("#action-override").check()
    page.locator("#action-confirm").click()  # an override without a reason: refused by the page
    expect(page.locator("#action-results")).to_be_hidden()
    page.locator("#action-reason").fill("Burn-in rig down; vendor ran dcgmi diag -r 3 on site")
    page.locator("#action-confirm").click()
    expect(page.locator("#action-results li.ok")).to_have_count(1)
    page.locator("#action-cancel").click()
    expect(page.locator("#node-lifecycle")).to_have_text("In service")
    newest = page.locator("#lifecycle-history tbody tr").first
    expect(newest).to_contain_text("burn-in overridden")
    expect(newest).to_contain_text("vendor ran dcgmi diag")
    assert NodeTransition.objects.filter(node=node, burn_in_override=True).count() == 1
