"""The nodes list and a node's page as the server renders them: filters, search, roles, 404, empty state."""

import json
import re

import pytest
from django.test import Client
from django.utils import timezone

from apps.accounts.models import User
from apps.accounts.roles import Role
from apps.failures.conditions import Observation, xid_condition
from apps.failures.recording import raise_failure
from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Node
from tests import factories
from tests.dashboard.node_data import gpu_metrics, node_with_history

pytestmark = pytest.mark.django_db


def signed_in(role: str) -> Client:
    client = Client()
    client.force_login(User.objects.create_user(f"{role}-page", role=role))
    return client


@pytest.fixture
def viewer_client() -> Client:
    return signed_in(Role.VIEWER)


@pytest.fixture
def operator_client() -> Client:
    return signed_in(Role.OPERATOR)


@pytest.fixture
def fleet() -> dict[str, Node]:
    """Four nodes in two clusters and two types; two under a leaf switch; one quarantined, one online."""
    east, west = factories.cluster("east"), factories.cluster("west")
    big, small = factories.node_type("hgx-big", nics=1, gpus=2), factories.node_type("hgx-small", nics=1, gpus=1)
    nodes = {
        "a": factories.node(east, big, "gpu-a01"),
        "b": factories.node(east, small, "gpu-b02", lifecycle=Lifecycle.QUARANTINED),
        "c": factories.node(west, big, "gpu-c03", lifecycle=Lifecycle.DRAINED),
        "d": factories.node(west, small, "gpu-d04"),
    }
    Node.objects.filter(pk=nodes["d"].pk).update(serial="SER-XYZ-9", liveness=Liveness.ONLINE)
    leaf = factories.switch(factories.fabric(east))
    for key in ("a", "b"):
        factories.cable_node_to_leaf(nodes[key], leaf)
    nodes["leaf"] = leaf
    return nodes


def listed(response) -> list[dict]:
    """The rows the page gives its script to draw (the browser tests see them drawn)."""
    data = re.search(r'<script id="nodes-page" type="application/json">(.*?)</script>', response.content.decode(), re.S)
    return json.loads(data.group(1))["rows"]


def row_of(response, node: Node) -> dict:
    return next(row for row in listed(response) if row["id"] == node.pk)


def hostnames(response) -> list[str]:
    return [row["hostname"] for row in listed(response)]


# Nodes list ---------------------------------------------------------------------------------------


def test_it_lists_every_node_by_hostname_with_its_cluster_type_and_states(viewer_client, fleet):
    response = viewer_client.get("/nodes/")

    assert response.status_code == 200
    assert hostnames(response) == ["gpu-a01", "gpu-b02", "gpu-c03", "gpu-d04"]
    row = row_of(response, fleet["b"])
    assert (row["cluster"], row["type"], row["leaf"], row["gpus"]) == ("east", "hgx-small", fleet["leaf"].name, 1)
    assert (row["lifecycle"], row["liveness"], row["alarms"], row["severity"]) == ("quarantined", "unknown", 0, None)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("q=b02", ["gpu-b02"]),
        ("q=xyz-9", ["gpu-d04"]),  # the serial, case-insensitive
        ("lifecycle=quarantined", ["gpu-b02"]),  # the fleet page's links
        ("lifecycle=quarantined&lifecycle=drained", ["gpu-b02", "gpu-c03"]),
        ("liveness=online", ["gpu-d04"]),
        ("cluster_name=west", ["gpu-c03", "gpu-d04"]),
        ("node_type_name=hgx-big", ["gpu-a01", "gpu-c03"]),
        ("cluster_name=east&node_type_name=hgx-big", ["gpu-a01"]),
        ("q=&lifecycle=&sort=power&dir=desc", ["gpu-a01", "gpu-b02", "gpu-c03", "gpu-d04"]),
    ],
)
def test_it_searches_and_filters_from_the_query_string(viewer_client, fleet, query, expected):
    assert hostnames(viewer_client.get(f"/nodes/?{query}")) == expected


def test_it_filters_by_leaf_switch(viewer_client, fleet):
    response = viewer_client.get(f"/nodes/?leaf_switch_name={fleet['leaf'].name}")

    assert hostnames(response) == ["gpu-a01", "gpu-b02"]
    leaf = fleet["leaf"].name
    assert f'<option value="{leaf}" selected>{leaf}</option>' in response.content.decode()


def test_the_filters_show_what_is_applied_and_how_many_match(viewer_client, fleet):
    page = viewer_client.get("/nodes/?lifecycle=drained&q=c0").content.decode()

    assert '<option value="drained" selected>Drained</option>' in page
    assert 'value="c0"' in page
    assert "1 of 4" in page
    assert 'id="clear-filters"' in page


def test_a_filter_value_it_does_not_know_is_explained_and_left_out(viewer_client, fleet):
    response = viewer_client.get("/nodes/?lifecycle=broken&cluster_name=east")

    assert response.status_code == 200
    assert "Filter not applied" in response.content.decode()
    assert "broken" in response.content.decode()
    assert hostnames(response) == ["gpu-a01", "gpu-b02"]  # the filters it understood still apply


def test_no_match_says_so_and_offers_every_node(viewer_client, fleet):
    page = viewer_client.get("/nodes/?q=nothing-like-this").content.decode()

    assert 'id="no-match"' in page
    assert "nodes-table" not in page


def test_the_live_columns_start_from_the_newest_samples_and_the_alarms(viewer_client, fleet):
    now = timezone.now()
    factories.latest_gpus(fleet["d"], now, [gpu_metrics(i, util_gpu=70.0 + i, power_w=600.0) for i in range(2)])
    raise_failure(Observation(fleet["d"].pk, now, xid_condition(79), gpu_index=0, xid=79), actor="test")

    response = viewer_client.get("/nodes/")

    row = row_of(response, fleet["d"])
    assert (row["util_gpu_mean"], row["power_w_total"], row["temp_c_max"]) == (70.5, 1200.0, 61.0)
    assert (row["alarms"], row["severity"]) == (1, "critical")
    assert row["seen"] == round(now.timestamp(), 3)  # its newest sample: it has no heartbeat on record
    assert row_of(response, fleet["c"])["seen"] is None


def test_what_the_script_draws_is_escaped_by_the_page(viewer_client, fleet):
    Node.objects.filter(pk=fleet["a"].pk).update(serial="</script><script>alert(1)</script>")

    page = viewer_client.get("/nodes/").content.decode()

    assert "</script><script>alert(1)" not in page
    assert row_of(viewer_client.get("/nodes/"), fleet["a"])["serial"] == "</script><script>alert(1)</script>"


def test_viewers_get_no_checkboxes_or_bulk_actions(viewer_client, fleet):
    page = viewer_client.get("/nodes/").content.decode()

    assert 'type="checkbox"' not in page
    assert 'id="bulk-bar"' not in page
    assert "Quarantine…" not in page
    assert 'id="action-dialog"' not in page


def test_operators_get_a_checkbox_per_node_and_the_bulk_actions(operator_client, fleet):
    page = operator_client.get("/nodes/").content.decode()

    assert 'id="select-all"' in page  # the rows' own checkboxes are drawn by the script
    assert "Quarantine…" in page
    assert "Return to service…" in page
    assert 'id="action-dialog"' in page


@pytest.mark.parametrize("path", ["/nodes/", "/"])
def test_without_nodes_both_pages_tell_a_new_user_how_to_start(viewer_client, path):
    page = viewer_client.get(path).content.decode()

    assert 'id="empty-fleet"' in page
    assert "import_inventory" in page
    assert "simulate" in page
    assert "cp-agent enroll" in page


def test_pages_need_a_signed_in_user():
    assert Client().get("/nodes/").status_code == 302
    assert Client().get("/nodes/1/").status_code == 302


# One node -------------------------------------------------------------------------------------------


@pytest.fixture
def detailed() -> Node:
    return node_with_history(gpus=4, ports=3, failures=4, transitions=2)


def section(page: str, element_id: str) -> str:
    match = re.search(rf'<section[^>]*id="{element_id}".*?</section>', page, re.S)
    assert match, f"no section #{element_id}"
    return match.group(0)


def test_an_unknown_node_is_a_404_page_not_an_error(viewer_client):
    response = viewer_client.get("/nodes/987654/")

    assert response.status_code == 404
    assert "No node 987654" in response.content.decode()
    assert 'href="/nodes/"' in response.content.decode()


def test_the_header_says_what_and_where_the_node_is(viewer_client, detailed):
    page = viewer_client.get(f"/nodes/{detailed.pk}/").content.decode()
    header = section(page, "node-header")

    for text in ("gpu-detail", detailed.cluster.name, detailed.node_type.name, "SN-4242", "In service", "Online"):
        assert text in header
    assert "Last seen" in header


def test_the_failure_history_lists_active_failures_then_resolved_ones_with_what_to_do(viewer_client, detailed):
    history = section(viewer_client.get(f"/nodes/{detailed.pk}/").content.decode(), "failures")

    active, resolved = history.split('id="resolved-failures"')
    assert "XID 79" in active
    assert "Acknowledged" in active
    assert "mlx5_1/1" in active
    assert "drain the node and reset the GPU" in active  # what to do, from the XID catalog
    assert resolved.count("XID 13") == 2
    assert "job bug" in resolved


def test_the_gpu_tables_decode_throttle_reasons_and_show_error_counters(viewer_client, detailed):
    page = viewer_client.get(f"/nodes/{detailed.pk}/").content.decode()
    gpus, counters = section(page, "gpus"), section(page, "counters")

    assert "hardware slowdown" in gpus
    assert "power cap" in gpus
    assert gpus.count("<tr data-gpu=") == 4
    assert "2619" in gpus
    first = re.search(r'<tr data-gpu="0"[^>]*>.*?</tr>', counters, re.S).group(0)
    assert 'class="num bad">2<' in first  # uncorrected volatile ECC: flagged
    assert ">7<" in first  # PCIe replays


def test_the_nvlink_matrix_and_the_ports_latest_samples(viewer_client, detailed):
    page = viewer_client.get(f"/nodes/{detailed.pk}/").content.decode()
    nvlink, ports = section(page, "nvlink"), section(page, "ports")

    assert nvlink.count("NV18") == 4 * 3
    assert ports.count("<tr data-port=") == 3
    last = re.search(r'<tr data-port="mlx5_2/1"[^>]*>.*?</tr>', ports, re.S).group(0)
    assert "down" in last.lower()
    assert ">11<" in last


def test_lifecycle_history_is_newest_first_with_actor_and_reason(viewer_client, detailed):
    history = section(viewer_client.get(f"/nodes/{detailed.pk}/").content.decode(), "lifecycle-history")

    assert history.index("change 1") < history.index("change 0")
    assert "otto" in history
    assert "after a passed burn-in" in history  # change 1 returned it to service on one


def test_lifecycle_history_marks_an_override_of_the_burn_in(viewer_client):
    node = factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-override", lifecycle="quarantined")
    node.transition("in_service", actor="root", reason="vendor report on file", override_burn_in=True)

    history = section(viewer_client.get(f"/nodes/{node.pk}/").content.decode(), "lifecycle-history")

    assert "burn-in overridden" in history
    assert "vendor report on file" in history


def test_operators_get_only_the_actions_the_current_state_allows(operator_client, detailed):
    actions = section(operator_client.get(f"/nodes/{detailed.pk}/").content.decode(), "node-header")

    assert re.search(r'data-action="quarantine"(?![^>]*hidden)', actions)
    assert re.search(r'data-action="drain"(?![^>]*hidden)', actions)
    assert re.search(r'data-action="return_to_service"[^>]*hidden', actions)  # it is in service already


def test_viewers_get_no_action_buttons_on_a_node(viewer_client, detailed):
    page = viewer_client.get(f"/nodes/{detailed.pk}/").content.decode()

    assert "data-action=" not in page
    assert 'id="action-dialog"' not in page
    assert "data-ack" not in page
    assert "data-resolve" not in page
