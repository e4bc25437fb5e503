"""The nodes list and a node's page in real headless Chromium: roles, bulk lifecycle actions seen live
by another browser, charts from stored telemetry, the failure history; screenshots of both pages.

Test data is written off Playwright's loop (``off_the_loop``): what it publishes to browsers goes
through async_to_sync."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Node, NodeTransition
from tests import factories
from tests.dashboard.conftest import node_action, off_the_loop, screenshot
from tests.dashboard.node_data import gpu_metrics, node_with_history

pytestmark = pytest.mark.browser

WALL = (3840, 2160)


def small_fleet(count: int = 24) -> list[Node]:
    """Nodes under two leaves with a newest sample per GPU, a few quarantined, drained or unreachable."""
    cluster = factories.cluster("prod-east")
    node_type = factories.node_type("hgx-h100", nics=2)
    fabric = factories.fabric(cluster)
    leaves = [factories.switch(fabric), factories.switch(fabric)]
    now = timezone.now()
    nodes = []
    for i in range(count):
        lifecycle = {3: Lifecycle.QUARANTINED, 7: Lifecycle.DRAINED, 11: Lifecycle.BURN_IN}.get(i, Lifecycle.IN_SERVICE)
        node = factories.node(cluster, node_type, f"gpu-{i + 1:03d}", lifecycle=lifecycle)
        factories.cable_node_to_leaf(node, leaves[i // 12])
        liveness = Liveness.UNREACHABLE if i == 5 else Liveness.ONLINE
        Node.objects.filter(pk=node.pk).update(liveness=liveness, last_seen_at=now, serial=f"SN{7000 + i}")
        factories.latest_gpus(
            node,
            now,
            [gpu_metrics(g, util_gpu=float((i * 13 + g * 7) % 100), temp_c=45.0 + (i * 3 + g) % 40) for g in range(8)],
        )
        nodes.append(node)
    return nodes


def forged_post(page: Page, path: str, body: dict) -> tuple[int, str]:
    """A request made with the page's session cookie and CSRF token, as a script could forge it."""
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(path, data=body, headers={"X-CSRFToken": csrf, "Referer": page.url})
    return response.status, response.text()


def wait_until_live(page: Page) -> None:
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def test_a_viewer_gets_no_actions_and_a_forged_lifecycle_request_is_refused(open_page, viewer):
    node = off_the_loop(node_with_history, transitions=0)

    page = open_page(viewer, "/nodes/")
    expect(page.locator("#nodes-table tbody tr")).to_have_count(1)
    expect(page.locator("input[type=checkbox]")).to_have_count(0)
    expect(page.locator("#bulk-bar, [data-action]")).to_have_count(0)
    status, body = forged_post(page, f"/api/v1/nodes/{node.pk}/quarantine", {"reason": "forged"})

    assert status == 403
    assert "CSRF" not in body  # refused for the role, not for a missing token
    detail = open_page(viewer, f"/nodes/{node.pk}/")
    expect(detail.locator("#active-failures")).to_contain_text("XID 79")
    expect(detail.locator("[data-action], [data-ack], [data-resolve]")).to_have_count(0)
    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.IN_SERVICE
    assert not NodeTransition.objects.filter(node=node).exists()


def test_an_operator_quarantines_in_bulk_and_another_open_page_sees_it_live(open_page, operator, viewer):
    nodes = off_the_loop(small_fleet, 6)
    Node.objects.filter(pk=nodes[4].pk).update(lifecycle=Lifecycle.RETIRED)
    open_page.expect_console_error("status of 409")  # the retired node's refusal, shown to the user
    watcher = open_page(viewer, "/nodes/")
    wait_until_live(watcher)

    page = open_page(operator, "/nodes/?sort=hostname&dir=asc")
    for node in (nodes[0], nodes[1], nodes[4]):
        page.get_by_label(f"Select {node.hostname}").check()
    expect(page.locator("#selected-count")).to_have_text("3 nodes selected")
    page.get_by_role("button", name="Quarantine…").click()
    page.locator("#action-reason").fill("")
    page.locator("#action-confirm").click()  # no reason: refused by the page, nothing sent
    expect(page.locator("#action-results")).to_be_hidden()
    page.locator("#action-reason").fill("NCCL all-reduce 30% below its leaf siblings")
    page.locator("#action-confirm").click()

    results = page.locator("#action-results li")
    expect(results).to_have_count(3)
    expect(page.locator("#action-results li.ok")).to_have_count(2)
    refused = page.locator("#action-results li.refused")
    expect(refused).to_contain_text(nodes[4].hostname)
    expect(refused).to_contain_text("retired")
    screenshot(page, "nodes-bulk-quarantine")
    for node in nodes[:2]:  # the other browser, without reloading
        expect(watcher.locator(f'tr[data-node="{node.pk}"] td[data-k="lifecycle"]')).to_have_text("Quarantined")
    expect(watcher.locator(f'tr[data-node="{nodes[2].pk}"] td[data-k="lifecycle"]')).to_have_text("In service")
    changes = NodeTransition.objects.filter(to_state=Lifecycle.QUARANTINED).order_by("node__hostname")
    assert [(c.node_id, c.actor, c.reason) for c in changes] == [
        (n.pk, "otto", "NCCL all-reduce 30% below its leaf siblings") for n in nodes[:2]
    ]
    page.locator("#action-cancel").click()
    expect(page.locator("#selected-count")).to_have_text("1 node selected")  # the refused one, to deal with next


def test_the_nodes_list_sorts_filters_and_shows_live_utilization(open_page, operator):
    nodes = off_the_loop(small_fleet)

    page = open_page(operator, "/nodes/")
    wait_until_live(page)
    page.get_by_role("button", name="Utilization").click()  # numbers: the busiest first
    busiest = max(nodes[:5] + nodes[6:], key=lambda n: sum((nodes.index(n) * 13 + g * 7) % 100 for g in range(8)))
    expect(page.locator("#nodes-table tbody tr").first).to_have_attribute("data-node", str(busiest.pk))
    # Unreachable: its last value, greyed (sorted after every current one)
    expect(page.locator(f'tr[data-node="{nodes[5].pk}"] td[data-k="util"] .num .stale')).to_have_count(1)
    assert "sort=util&dir=desc" in page.url
    screenshot(page, "nodes")
    page.get_by_label("Lifecycle").select_option("quarantined")
    expect(page.locator("#nodes-table tbody tr")).to_have_count(1)
    assert re.search(r"lifecycle=quarantined", page.url)

    dark = open_page(operator, "/nodes/", dark=True)
    wait_until_live(dark)
    screenshot(dark, "nodes-dark")
    wall = open_page(operator, "/nodes/", viewport=WALL)
    wait_until_live(wall)
    screenshot(wall, "nodes-4k")


def test_a_node_page_charts_its_stored_telemetry_and_operators_act_on_it(open_page, operator, viewer):
    node = off_the_loop(node_with_history, transitions=0)
    watcher = open_page(viewer, f"/nodes/{node.pk}/")
    wait_until_live(watcher)

    page = open_page(operator, f"/nodes/{node.pk}/")
    expect(page.locator("#chart-status")).to_contain_text("raw samples")
    expect(page.locator("#charts canvas")).to_have_count(6)
    first = page.locator("#charts figure").first
    first.locator(".u-over").hover()  # the tooltip shows each GPU's value at that moment
    expect(first.locator(".chart-tip")).to_contain_text(re.compile(r"GPU 0 \d+ %"))
    expect(first.locator(".chart-tip")).to_contain_text("GPU 7")
    expect(page.locator("#active-failures")).to_contain_text("XID 79")
    expect(page.locator("#gpus")).to_contain_text("hardware slowdown")
    screenshot(page, "node-detail")
    page.get_by_role("button", name="24 h").click()  # no minute rollups yet: it says so
    expect(page.locator("#chart-status")).to_have_text("no telemetry stored for this window")
    assert "window=24h" in page.url
    page.get_by_role("button", name="15 min").click()
    expect(page.locator("#chart-status")).to_contain_text("raw samples")

    node_action(page, "quarantine", "XID 79: GPU 0 fell off the bus")
    expect(page.locator("#node-lifecycle")).to_have_text("Quarantined")
    expect(page.locator('#node-actions [data-action="quarantine"]')).to_be_hidden()
    expect(page.locator('#node-actions [data-action="return_to_service"]')).to_be_visible()
    expect(watcher.locator("#node-lifecycle")).to_have_text("Quarantined")  # live, no reload

    xid = page.locator("#active-failures tr", has_text="XID 79")
    xid.get_by_role("button", name="Acknowledge").click()
    expect(xid.locator(".pill.fs-acknowledged")).to_be_visible()
    expect(watcher.locator("#active-failures tr", has_text="XID 79")).to_contain_text("Acknowledged")

    dark = open_page(viewer, f"/nodes/{node.pk}/", dark=True)
    expect(dark.locator("#chart-status")).to_contain_text("raw samples")
    screenshot(dark, "node-detail-dark")
    wall = open_page(viewer, f"/nodes/{node.pk}/", viewport=WALL)
    expect(wall.locator("#chart-status")).to_contain_text("raw samples")
    screenshot(wall, "node-detail-4k")


def test_an_unknown_node_is_a_page_that_says_so(open_page, viewer):
    open_page.expect_console_error("status of 404")  # the page itself answers 404
    page = open_page(viewer, "/nodes/424242/")

    expect(page.locator("#node-missing")).to_contain_text("No node 424242")


def test_the_nodes_list_without_nodes_tells_a_new_user_what_to_do(open_page, viewer):
    page = open_page(viewer, "/nodes/")

    expect(page.locator("#empty-fleet")).to_contain_text("import_inventory")
    screenshot(page, "nodes-empty")
