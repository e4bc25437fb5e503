"""The failures, topology, racks and reliability pages: what they render for each role and query
(Django's test client). In a real browser: test_pages_ops_browser.py (each page over a fleet) and
test_pages_failures_live.py (the failures feed live, its actions and paging)."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.accounts.models import User
from apps.dashboard.templatetags.durations import hours
from apps.failures.events import record_event, record_events
from apps.failures.models import Failure
from apps.inventory.models import Node, Rack
from tests import factories
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


@pytest.mark.parametrize("severity", ["critical", "error", "warning"])
def test_the_topology_legend_explains_every_alarm_outline_a_chip_can_show(viewer_user, gpu_node, severity):
    factories.cable_node_to_leaf(gpu_node, factories.switch(factories.fabric(gpu_node.cluster)))
    html = page(viewer_user, "/topology/")
    legend = html[html.index('<div class="legend">') :]
    assert f'<span class="node-chip legend-chip" data-severity="{severity}"></span>' in legend[: legend.index("</div>")]


def test_the_topology_costs_the_same_queries_whatever_the_fleet_and_its_readings(
    viewer_user, gpu_node, django_assert_num_queries
):
    leaf = factories.switch(factories.fabric(gpu_node.cluster))
    now = timezone.now()

    def cabled_with_readings(node: Node) -> None:
        factories.cable_node_to_leaf(node, leaf)
        factories.latest_ports(
            node, now, [dict(device=port.device_name, port=port.port_num, state="active",
                             rate_gbps=400.0, tx_gbps=100.0, rx_gbps=50.0) for port in node.ports.all()],
        )  # fmt: skip

    cabled_with_readings(gpu_node)
    client = Client()
    client.force_login(viewer_user)
    client.get("/topology/")  # the session and the user are read the same way on every request
    with django_assert_num_queries(10) as one_node:  # the loads read apart from the overview: a row per node
        assert "25 %" in client.get("/topology/").content.decode()  # 100 of 400 Gb/s on each port
    for n in range(5):
        cabled_with_readings(factories.node(gpu_node.cluster, gpu_node.node_type, f"gpu-1{n:02d}"))
    with django_assert_num_queries(len(one_node)):
        html = client.get("/topology/").content.decode()
    assert html.count('class="node-chip"') == 6


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
    assert "Time in fleet" in mtbf  # "4 min" or "120 h": the column is a duration, not hours
    assert "(little exposure)" in mtbf


def test_reliability_explains_a_period_it_does_not_offer(viewer_user, gpu_node):
    html = page(viewer_user, "/reliability/?days=12")
    assert "is not a period this page offers" in html
    assert 'href="?days=30" aria-current="page"' in html
    assert "No failures in the last 30 days" in html
    assert "no failures" in html  # the node's MTBF


# A small fleet for the browser ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (None, "–"),
        (0.0, "< 1 min"),
        (0.0631, "4 min"),
        (0.99, "59 min"),
        (1.0, "1 h"),
        (10.55, "10.6 h"),
        (1200.0, "1,200 h"),
    ],
)
def test_durations_in_hours_are_written_in_minutes_under_an_hour(value, written):
    assert hours(value) == written


def test_a_minutes_old_fleets_mtbf_reads_in_minutes_not_zero_hours(viewer_user, gpu_node):
    record_event(gpu_node.pk, xid(79, at=timezone.now().timestamp() - 60))
    html = page(viewer_user, "/reliability/")
    mtbf = re.search(r'<table class="data sortable" id="mtbf">.*?</table>', html, re.S).group(0)
    assert re.search(r'> ?(\d+ min|&lt; 1 min) <span class="muted">\(little exposure\)</span>', mtbf)
    assert "0.0 h" not in html
