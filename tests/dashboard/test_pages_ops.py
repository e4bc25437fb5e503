"""The failures, topology, racks and reliability pages: what they render for each role and query
(Django's test client), and what they do in a real browser (headless Chromium, ``-m browser``)."""

import re
import time
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Page, expect

from agents.protocol import GpuEvent
from apps.accounts.models import AuditLogEntry, User
from apps.failures.events import node_unreachable, record_event, record_events
from apps.failures.models import Failure
from apps.inventory.choices import FabricKind, FabricTopology, Liveness, SwitchTier
from apps.inventory.models import Fabric, Node, Rack
from apps.telemetry.models import LatestGpuSample, LatestPortSample
from tests import factories
from tests.dashboard.conftest import off_the_loop, screenshot
from tests.failures.conftest import T0, events, xid


def page(user: User, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


@pytest.fixture
def viewer_user(db) -> User:
    return User.objects.create_user("vic", role="viewer")


@pytest.fixture
def operator_user(db) -> User:
    return User.objects.create_user("ole", role="operator")


@pytest.fixture
def gpu_node(db) -> Node:
    return factories.node(factories.cluster(), factories.node_type(nics=2), "gpu-017")


# Failures: Django client ---------------------------------------------------------------------------


def test_the_feed_shows_an_open_failure_with_its_advice_and_collapses_its_side_effects(viewer_user, gpu_node):
    record_events(gpu_node.pk, events(xid(79, gpu=3, data="GPU has fallen off the bus."), xid(45, gpu=3, at=T0 + 1)))
    record_event(gpu_node.pk, xid(79, gpu=3, at=T0 + 2))  # a repeat
    Failure.objects.filter(xid=79).update(recovery_action=4)

    html = page(viewer_user, "/failures/")

    assert f'href="/nodes/{gpu_node.pk}/"' in html
    assert "GPU 3" in html
    assert "XID 79" in html
    assert "×2" in html
    assert "GPU has fallen off the bus." in html
    assert "drain the node" in html  # the catalog's recommended action
    assert "Drain the node, then reset the GPU." in html  # NVML's recovery action in words
    assert "caused 1 side effect" in html
    assert html.count('data-failure="') == 1  # the side effect is not a row of its own


def test_a_viewer_gets_no_action_buttons_and_an_operator_does(viewer_user, operator_user, gpu_node):
    record_event(gpu_node.pk, xid(79))
    viewer_html, operator_html = page(viewer_user, "/failures/"), page(operator_user, "/failures/")
    assert 'data-action="acknowledge"' not in viewer_html
    assert 'data-action="resolve"' not in viewer_html
    assert 'id="resolve-dialog"' not in viewer_html
    assert 'data-action="acknowledge"' in operator_html
    assert 'data-action="resolve"' in operator_html


def test_an_acknowledged_failure_offers_only_resolve(operator_user, gpu_node):
    record_event(gpu_node.pk, xid(79)).acknowledge(actor="alice")
    html = page(operator_user, "/failures/")
    assert "Acknowledged by alice" in html
    assert 'data-action="acknowledge"' not in html
    assert 'data-action="resolve"' in html


@pytest.mark.parametrize(
    ("query", "expected_xids"),
    [
        ("", [13, 79]),  # the feed: open and acknowledged
        ("?state=open", [79]),
        ("?state=acknowledged", [13]),
        ("?state=resolved", [48]),
        ("?state=all", [13, 48, 79]),
        ("?severity=critical", [79]),
        ("?state=all&kind=xid&hostname=gpu-017", [13, 48, 79]),
        ("?hostname=gpu-999", []),
        ("?state=all&since=1h", [13]),
        ("?state=all&since=2026-03-01T12:00:30Z", [13, 48]),
    ],
)
def test_it_filters_as_the_query_string_says(viewer_user, gpu_node, query, expected_xids):
    now = timezone.now()
    record_event(gpu_node.pk, xid(79, gpu=1))
    record_event(gpu_node.pk, xid(48, gpu=2, at=T0 + 60)).resolve(actor="bob")
    record_event(gpu_node.pk, xid(13, gpu=4, at=T0 + 120)).acknowledge(actor="bob")
    Failure.objects.filter(xid=13).update(last_seen=now - timedelta(minutes=5))

    html = page(viewer_user, f"/failures/{query}")

    shown = sorted(f.xid for f in Failure.objects.all() if f'data-failure="{f.pk}"' in html)
    assert shown == expected_xids


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?state=broken", "Unknown state"),
        ("?severity=dire", "dire is not a valid choice; valid choices are"),
        ("?since=yesterday", "Enter a valid date/time"),
    ],
)
def test_a_filter_it_cannot_use_is_explained_not_a_500(viewer_user, gpu_node, query, message):
    record_event(gpu_node.pk, xid(79))
    html = page(viewer_user, f"/failures/{query}")
    assert message in html
    assert 'data-failure="' not in html


def test_it_pages_with_load_more(viewer_user, gpu_node):
    for i in range(55):
        record_event(gpu_node.pk, xid(13, gpu=i % 8, at=T0 + i * 100, data=f"run {i}")).resolve(actor="bob")
    first = page(viewer_user, "/failures/?state=resolved")
    assert first.count('data-failure="') == 50
    assert "offset=50" in first
    rest = page(viewer_user, "/failures/?state=resolved&offset=50&partial=1")
    assert rest.count('data-failure="') == 5
    assert "Load more" not in rest
    assert "<html" not in rest  # the partial is the list alone


def test_the_empty_feed_says_where_failures_come_from(viewer_user, gpu_node):
    html = page(viewer_user, "/failures/")
    assert "No open failures" in html
    assert "XID" in html


def test_without_nodes_it_says_how_to_get_some(viewer_user):
    html = page(viewer_user, "/failures/")
    assert "No nodes yet" in html
    assert "import_inventory" in html
    assert "simulate" in html


# Topology, racks, reliability: Django client ----------------------------------------------------------


@pytest.mark.parametrize("path", ["/topology/", "/racks/", "/reliability/"])
def test_without_nodes_each_page_says_how_to_get_some(viewer_user, path):
    html = page(viewer_user, path)
    assert "No nodes yet" in html
    assert "import_inventory" in html


def test_the_topology_without_a_fabric_says_how_to_describe_one(viewer_user, gpu_node):
    html = page(viewer_user, "/topology/")
    assert "No fabric in the inventory yet" in html


def test_the_topology_shows_each_leaf_with_its_nodes(viewer_user, gpu_node):
    leaf = factories.switch(factories.fabric(gpu_node.cluster))
    factories.cable_node_to_leaf(gpu_node, leaf)
    html = page(viewer_user, "/topology/")
    assert leaf.name in html
    assert f'href="/nodes/{gpu_node.pk}/"' in html
    assert "2/2" in html  # both of its ports up
    assert "node links: " in html


def test_racks_place_racked_nodes_and_list_the_others_apart(viewer_user, gpu_node):
    rack = Rack.objects.create(cluster=gpu_node.cluster, name="r07")
    Node.objects.filter(pk=gpu_node.pk).update(rack=rack, rack_position=3)
    loose = factories.node(gpu_node.cluster, gpu_node.node_type, "gpu-018")
    html = page(viewer_user, "/racks/")
    assert "r07" in html
    assert 'data-grid-row="33 / span 8"' in html  # units 3 to 10 of 42, drawn top first
    assert 'id="unracked"' in html
    assert f'data-node="{loose.pk}"' in html


@pytest.mark.parametrize(("query", "days", "failures"), [("", 30, 2), ("?days=7", 7, 1), ("?days=365", 365, 2)])
def test_reliability_covers_the_chosen_period(viewer_user, gpu_node, query, days, failures):
    now = timezone.now().timestamp()
    record_event(gpu_node.pk, xid(79, at=now - 3600))
    record_event(gpu_node.pk, xid(48, gpu=1, at=now - 10 * 86400))
    html = page(viewer_user, f"/reliability/{query}")
    assert f'href="?days={days}" aria-current="page"' in html
    assert f'<span class="value">{failures}</span><span class="label">failures</span>' in html
    assert 'id="worst-nodes"' in html


def test_reliability_shows_the_exposure_each_figure_rests_on_and_says_when_it_is_too_little(viewer_user, gpu_node):
    record_event(gpu_node.pk, xid(79, at=timezone.now().timestamp() - 60))  # a node minutes old
    html = page(viewer_user, "/reliability/")
    assert "GPU-years of exposure" in html
    caveats = re.search(r'<ul class="hint" id="reliability-caveats".*?</ul>', html, re.S).group(0)
    assert "too little to mean much yet" in caveats
    assert "1 of 1 nodes were in the fleet under 168 hours of the period" in caveats
    mtbf = re.search(r'<table class="data sortable" id="mtbf">.*?</table>', html, re.S).group(0)
    assert "Hours in fleet" in mtbf
    assert "(little exposure)" in mtbf


def test_reliability_explains_a_period_it_does_not_offer(viewer_user, gpu_node):
    html = page(viewer_user, "/reliability/?days=12")
    assert "is not a period this page offers" in html
    assert 'href="?days=30" aria-current="page"' in html
    assert "No failures in the last 30 days" in html
    assert "no failures" in html  # the node's MTBF


# A small fleet for the browser ---------------------------------------------------------------------


@dataclass
class OpsFleet:
    nodes: list[Node]
    hot: Node  # the hottest node, drawing the most power
    unreachable: Node
    unracked: Node


def ops_fleet() -> OpsFleet:
    """Two racks of four 8-GPU nodes under two leaves and two spines, an empty rack, a node in no
    rack, live samples (one node hot, one unreachable), port load, and a few days of failures."""
    cluster = factories.cluster("h100-east")
    node_type = factories.node_type("hgx-h100-80g", nics=4)
    fabric = factories.fabric(cluster)
    Fabric.objects.create(name="nvl-h100", cluster=cluster, kind=FabricKind.NVLINK, topology=FabricTopology.NVSWITCH)
    spines = [factories.switch(fabric, SwitchTier.SPINE) for _ in range(2)]
    racks = [Rack.objects.create(cluster=cluster, name=f"r0{i}", power_budget_kw=Decimal(45)) for i in (1, 2, 3)]
    nodes = []
    for r, rack in enumerate(racks[:2]):
        leaf = factories.switch(fabric)
        for spine in spines:
            factories.uplink(leaf, spine, count=2)
        for slot, position in enumerate((2, 11, 20, 29)):
            node = factories.node(cluster, node_type, f"gpu-{r * 4 + slot + 1:03d}")
            Node.objects.filter(pk=node.pk).update(rack=rack, rack_position=position, liveness=Liveness.ONLINE)
            factories.cable_node_to_leaf(node, leaf)
            nodes.append(node)
    unracked = factories.node(cluster, node_type, "gpu-009")
    Node.objects.filter(pk=unracked.pk).update(liveness=Liveness.ONLINE)
    factories.nvlink_mesh(nodes[0])
    nodes.append(unracked)

    now = timezone.now()
    for i, node in enumerate(nodes):
        hot = i == 5
        LatestGpuSample.objects.bulk_create(
            LatestGpuSample(
                node=node,
                gpu_index=g,
                ts=now,
                received_at=now,
                util_gpu=95.0 if hot else 40.0 + 5 * i,
                util_mem=30.0,
                mem_used_mib=60_000,
                temp_c=(86.0 if hot else 48.0 + 3 * i) + g % 3,
                power_w=690.0 if hot else 300.0 + 30 * i,
                sm_clock_mhz=1980,
            )
            for g in range(8)
        )
        LatestPortSample.objects.bulk_create(
            LatestPortSample(
                node_id=node.pk,
                ts=now,
                device=f"mlx5_{p}",
                port=1,
                state="active",
                rate_gbps=400.0,
                tx_gbps=380.0 if hot else 20.0 * i,
                rx_gbps=100.0,
                received_at=now,
            )
            for p in range(4)
        )
    fleet = OpsFleet(nodes, nodes[5], nodes[3], unracked)

    ts = now.timestamp()
    record_events(
        nodes[5].pk, events(xid(79, gpu=3, at=ts - 60, data="GPU has fallen off the bus."), xid(45, gpu=3, at=ts - 59))
    )
    record_event(nodes[2].pk, xid(48, gpu=1, at=ts - 3 * 86400))
    for repeat in range(5):
        record_event(nodes[1].pk, xid(13, gpu=6, at=ts - 7200 + repeat * 60, data="Graphics SM Warp Exception"))
    record_event(nodes[1].pk, xid(94, gpu=2, at=ts - 86400)).acknowledge(actor="otto")
    record_event(nodes[6].pk, xid(74, gpu=0, at=ts - 5 * 86400)).resolve(actor="otto", note="NVLink cable reseated")
    record_event(
        nodes[4].pk,
        GpuEvent(
            ts=ts - 600,
            kind="port",
            port_device="mlx5_2",
            data="mlx5_2 port 1: state active → down; link went down 1 times",
        ),
    )
    Node.objects.filter(pk=fleet.unreachable.pk).update(liveness=Liveness.UNREACHABLE)
    node_unreachable(fleet.unreachable.pk)
    return fleet


# In the browser ------------------------------------------------------------------------------------

VIEWS = {  # name: viewport, dark
    "": ((1280, 800), False),
    "-dark": ((1280, 800), True),
    "-4k": ((3840, 2160), False),
}


def fits_the_width(page: Page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def live(page: Page) -> None:
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def failures_ready(page: Page, fleet: OpsFleet) -> None:
    live(page)
    expect(page.locator("#failure-list > li[data-failure]")).to_have_count(6)
    expect(page.locator(f'#failure-list a[href="/nodes/{fleet.hot.pk}/"]')).to_have_count(1)
    expect(page.get_by_text("caused 1 side effect")).to_be_visible()
    expect(page.get_by_text("×5")).to_be_visible()


def topology_ready(page: Page, fleet: OpsFleet) -> None:
    live(page)
    expect(page.locator(".node-chip[data-node]")).to_have_count(8)
    hot = page.locator(f'.node-chip[data-node="{fleet.hot.pk}"]')
    expect(hot).to_contain_text("95 %")  # 4 × 380 Gb/s of 4 × 400
    expect(hot).to_have_attribute("data-severity", "critical")  # its XID 79, from the fleet stream
    expect(page.locator(f'.node-chip[data-node="{fleet.unreachable.pk}"]')).to_have_attribute(
        "data-liveness", "unreachable"
    )
    expect(page.locator("#uncabled")).to_contain_text("gpu-009")


def racks_ready(page: Page, fleet: OpsFleet) -> None:
    live(page)
    expect(page.locator(f'.rack-node[data-node="{fleet.hot.pk}"] .value')).to_have_text("5.5 kW")  # 8 × 690 W
    expect(page.locator(f'.rack-node[data-node="{fleet.unreachable.pk}"]')).to_have_class("rack-node u8 unreachable")
    expect(page.locator("#unracked")).to_contain_text("gpu-009")
    expect(page.locator("#empty-racks")).to_contain_text("r03")


def reliability_ready(page: Page, fleet: OpsFleet) -> None:
    expect(page.locator("#worst-nodes tbody tr")).to_have_count(6)
    expect(page.locator("#by-model")).to_contain_text("NVIDIA H100 80GB HBM3")
    expect(page.locator("#mtbf tbody tr")).to_have_count(len(fleet.nodes))


PAGES = {
    "failures": ("/failures/", failures_ready),
    "topology": ("/topology/", topology_ready),
    "racks": ("/racks/", racks_ready),
    "reliability": ("/reliability/", reliability_ready),
}


@pytest.mark.browser
@pytest.mark.parametrize("name", list(PAGES))
def test_each_page_shows_the_fleet_light_and_dark_at_1280_and_at_4k(open_page, viewer, name):
    fleet = off_the_loop(ops_fleet)
    path, ready = PAGES[name]
    for suffix, (viewport, dark) in VIEWS.items():
        page = open_page(viewer, path, viewport=viewport, dark=dark)
        ready(page, fleet)
        assert fits_the_width(page), f"{name}{suffix} scrolls sideways"
        screenshot(page, f"{name}{suffix}")


@pytest.mark.browser
def test_racks_switch_to_temperature_and_keep_the_choice_in_the_address(open_page, viewer):
    fleet = off_the_loop(ops_fleet)
    page = open_page(viewer, "/racks/")
    hot = page.locator(f'.rack-node[data-node="{fleet.hot.pk}"]')
    expect(hot.locator(".value")).to_have_text("5.5 kW")

    page.get_by_text("Temperature").click()

    expect(hot.locator(".value")).to_have_text("88 °C")  # its hottest GPU: 86 + 2
    expect(page.locator("#legend-high")).to_have_text("90 °C")
    assert page.url.endswith("/racks/?metric=temp")
    assert "hottest GPU 88 °C" in hot.get_attribute("title")
    screenshot(page, "racks-temperature")
    page.reload()
    expect(hot.locator(".value")).to_have_text("88 °C")


@pytest.fixture
def node_042(transactional_db) -> Node:
    return factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-042")


@pytest.fixture
def xid_79(node_042) -> Failure:
    return off_the_loop(record_event, node_042.pk, xid(79, gpu=5, at=time.time()))


@pytest.mark.browser
def test_an_injected_xid_79_appears_in_the_open_feed_without_reload(open_page, viewer, node_042):
    page = open_page(viewer, "/failures/")
    expect(page.locator("#no-failures")).to_contain_text("No open failures")
    live(page)
    expect(page.locator("#failure-feed")).to_have_attribute("data-reads", "1")  # read again after the snapshot
    screenshot(page, "failures-empty")
    page.evaluate("window.notReloaded = true")

    off_the_loop(record_events, node_042.pk, events(xid(79, gpu=5, at=time.time(), data="fell off")))

    row = page.locator("#failure-list > li[data-failure]")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("XID 79")
    expect(row).to_contain_text("GPU 5")
    expect(row).to_contain_text("gpu-042")
    expect(page.locator("#failure-feed")).to_have_attribute("data-reads", "2")  # read again after the push
    assert page.evaluate("window.notReloaded") is True


@pytest.mark.browser
def test_an_operator_acknowledges_then_resolves_a_failure_from_the_page(open_page, operator, xid_79):
    failure = xid_79
    page = open_page(operator, "/failures/")
    row = page.locator(f'li[data-failure="{failure.pk}"]')
    screenshot(page, "failures-operator")

    with page.expect_response(lambda response: response.url.endswith("/acknowledge")):
        row.get_by_role("button", name="Acknowledge").click()
    expect(row).to_have_attribute("data-state", "acknowledged")
    expect(row).to_contain_text("Acknowledged by otto")
    failure.refresh_from_db()
    assert (failure.state, failure.acknowledged_by) == ("acknowledged", "otto")

    row.get_by_role("button", name="Resolve…").click()
    page.locator("#resolve-dialog textarea").fill("GPU reseated")
    screenshot(page, "failures-resolve")
    # The live feed can show the change before the API's answer is back (it is pushed on commit),
    # and the audit entry is written as the request ends: wait for the answer.
    with page.expect_response(lambda response: response.url.endswith("/resolve")):
        page.locator("#resolve-dialog").get_by_role("button", name="Resolve", exact=True).click()
    expect(page.locator("#no-failures")).to_contain_text("No open failures")  # it left the feed
    failure.refresh_from_db()
    assert (failure.state, failure.resolved_by, failure.resolution_note) == ("resolved", "otto", "GPU reseated")
    assert list(
        AuditLogEntry.objects.filter(object_id=str(failure.pk)).values_list("action", flat=True).order_by("id")
    ) == ["failure.open", "failure.acknowledge", "failure.resolve"]


@pytest.mark.browser
def test_a_viewer_sees_no_buttons_and_a_forged_acknowledge_is_refused(open_page, viewer, xid_79):
    failure = xid_79
    page = open_page(viewer, "/failures/")
    expect(page.locator(f'li[data-failure="{failure.pk}"]')).to_be_visible()
    expect(page.locator("button[data-action]")).to_have_count(0)
    expect(page.locator("#resolve-dialog")).to_have_count(0)

    # The viewer's own session and CSRF token, posted straight to the API the buttons would call.
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    for action in ("acknowledge", "resolve"):
        answer = page.context.request.post(f"/api/v1/failures/{failure.pk}/{action}", headers={"X-CSRFToken": csrf})
        assert answer.status == 403
        assert "needs the operator role" in answer.json()["detail"]  # refused by role, not for a missing token
    failure.refresh_from_db()
    assert failure.state == "open"
    assert list(AuditLogEntry.objects.filter(object_id=str(failure.pk)).values_list("action", flat=True)) == [
        "failure.open"
    ]


@pytest.mark.browser
def test_load_more_appends_the_next_page_in_place(open_page, viewer, node_042):
    now = timezone.now()
    Failure.objects.bulk_create(
        Failure(
            node=node_042,
            kind="xid",
            code=f"xid-{i}",
            xid=13,
            severity="warning",
            title=f"XID 13 number {i}",
            recommended_action="-",
            state="resolved",
            first_seen=now - timedelta(minutes=i),
            last_seen=now - timedelta(minutes=i),
        )
        for i in range(60)
    )
    page = open_page(viewer, "/failures/?state=resolved")
    rows = page.locator("#failure-list > li[data-failure]")
    expect(rows).to_have_count(50)
    # The live snapshot makes the page read its list again: click once that read has replaced the list,
    # or the read may land after the click and bring back a "Load more" row for the rows just loaded.
    live(page)
    expect(page.locator("#failure-feed")).to_have_attribute("data-reads", "1")

    page.get_by_role("link", name="Load more").click()

    expect(rows).to_have_count(60)
    expect(rows.last).to_contain_text("XID 13 number 59")  # oldest last
    expect(page.locator("#load-more")).to_have_count(0)
    assert page.url.endswith("/failures/?state=resolved")  # loaded in place
