"""apps/dashboard/fleet_layout.py: the fleet page's heatmap layout and scale tops, held as text and
read again when the inventory changes; the fleet page's queries, whatever the fleet's size; and
apps/dashboard/warm.py, what a server process compiles before its first page."""

import json
import re
from datetime import date
from decimal import Decimal

import pytest
from django.test import Client

from apps.accounts.models import User
from apps.dashboard.fleet_layout import MAX_AGE_S, NO_LEAF, FleetLayout
from apps.dashboard.warm import page_templates, warm_pages
from apps.inventory.models import Node
from tests import factories
from tests.dashboard.test_fleet_mirror import Clock
from tests.dashboard.test_pages_runs import page, queries


@pytest.fixture
def nodes(db) -> list[Node]:
    cluster, node_type = factories.cluster("east"), factories.node_type("h100")
    return [factories.node(cluster, node_type, f"gpu-{n:03d}") for n in range(3)]


def hostnames(text: str) -> list[str]:
    return [node["hostname"] for group in json.loads(text)["layout"] for node in group["nodes"]]


def test_the_layout_is_read_once_and_then_served_from_memory(nodes, django_assert_num_queries):
    layout = FleetLayout(clock=Clock())
    text = layout.read().layout_json
    assert hostnames(text) == ["gpu-000", "gpu-001", "gpu-002"]
    assert json.loads(text)["tops"] == {"power": 700, "mem": 80}
    with django_assert_num_queries(1):  # the inventory's version only
        assert layout.read().layout_json == text
    assert layout.reads == 1


def test_a_node_added_removed_or_renamed_is_in_the_next_layout(nodes):
    layout = FleetLayout(clock=Clock())
    layout.read()
    added = factories.node(nodes[0].cluster, nodes[0].node_type, "gpu-100")
    assert hostnames(layout.read().layout_json)[-1] == "gpu-100"
    added.delete()
    assert "gpu-100" not in hostnames(layout.read().layout_json)
    nodes[1].hostname = "gpu-zzz"
    nodes[1].save()
    assert hostnames(layout.read().layout_json) == ["gpu-000", "gpu-002", "gpu-zzz"]
    assert layout.reads == 4


def test_what_the_version_does_not_see_shows_within_the_max_age(nodes):
    clock = Clock()
    layout = FleetLayout(clock=clock)
    assert [group["leaf"] for group in json.loads(layout.read().layout_json)["layout"]] == [NO_LEAF]
    leaf = factories.switch(factories.fabric(nodes[0].cluster))
    factories.cable_node_to_leaf(nodes[0], leaf)
    clock.now = MAX_AGE_S - 1
    assert [group["leaf"] for group in json.loads(layout.read().layout_json)["layout"]] == [NO_LEAF]
    clock.now = MAX_AGE_S
    assert [group["leaf"] for group in json.loads(layout.read().layout_json)["layout"]] == [leaf.name, NO_LEAF]


def test_the_prices_in_force_are_held_beside_it_and_a_new_one_shows_within_the_max_age(nodes):
    clock = Clock()
    layout = FleetLayout(clock=clock)
    assert layout.read().pricing.unpriced == ["GPU-hours of h100", "energy in east"]
    factories.gpu_price(nodes[0].node_type, valid_from=date(2020, 1, 1), hourly_price_per_gpu=Decimal("2.49"))
    clock.now = MAX_AGE_S - 1
    assert layout.read().pricing.gpu_hour == {}
    clock.now = MAX_AGE_S
    assert layout.read().pricing.gpu_hour == {nodes[0].node_type.pk: Decimal("2.49")}
    assert layout.read().pricing.unpriced == ["energy in east"]


def test_the_layout_text_cannot_close_its_script_element(nodes):
    nodes[0].hostname = "</script><b>"
    nodes[0].save()
    text = FleetLayout().read().layout_json
    assert "<" not in text
    assert "</script><b>" in hostnames(text)


def test_the_fleet_pages_queries_do_not_grow_with_the_fleet(nodes):
    viewer = User.objects.create_user("vic", role="viewer")
    small = queries(viewer, "/")  # the layout read: the inventory changed since the last page
    for n in range(10, 20):
        factories.node(nodes[0].cluster, nodes[0].node_type, f"gpu-{n:03d}")
    assert queries(viewer, "/") == small
    assert queries(viewer, "/") < small  # no change since: the layout comes from memory


def test_the_fleet_page_embeds_the_layout_and_says_what_its_shell_cost(nodes):
    viewer = User.objects.create_user("vic", role="viewer")
    html = page(viewer, "/")
    embedded = re.search(r'<script id="fleet-layout" type="application/json">(.*?)</script>', html)
    assert hostnames(embedded.group(1)) == ["gpu-000", "gpu-001", "gpu-002"]
    client = Client()
    client.force_login(viewer)
    assert re.fullmatch(r"shell;dur=\d+\.\d", client.get("/")["Server-Timing"])


def test_a_server_process_compiles_every_dashboard_template_before_its_first_page():
    names = page_templates()
    assert {"dashboard/base.html", "dashboard/fleet.html", "dashboard/includes/action_dialog.html"} <= set(names)
    warm_pages()
