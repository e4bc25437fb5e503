"""Query parameters the API cannot read are a JSON 400 naming the parameter: numbers out of the
database's range or not whole, booleans that are neither, page sizes that are not numbers, choices
that are not among the valid ones (which the error lists). Never a 500, never a silent guess."""

import pytest

from apps.accounts.roles import Role
from apps.inventory.choices import Lifecycle
from tests import factories

pytestmark = pytest.mark.django_db

TOO_BIG = str(2**63)  # one past the largest BIGINT
WAY_TOO_BIG = "1" + "0" * 30

# (path, parameter): every number filter the attack found, and one of each kind of filter built from
# a model's integer column (``Meta.fields``) or declared in a filter set.
NUMBER_FILTERS = [
    ("links", "node"),
    ("links", "switch"),
    ("gpus", "cluster"),
    ("gpus", "index"),
    ("nvlinks", "node"),
    ("nvlinks", "lanes"),
    ("failures", "cluster"),
    ("failures", "xid"),
    ("network-ports", "connected_switch"),
    ("stragglers", "gpu_index"),
]


@pytest.fixture
def viewer(api_client):
    client = api_client(Role.VIEWER)
    client.raise_request_exception = False  # a 500 is a response to assert on, not an exception
    return client


@pytest.fixture
def node():
    return factories.node(factories.cluster(), factories.node_type(nics=1), "gpu-007")


@pytest.mark.parametrize(("path", "parameter"), NUMBER_FILTERS, ids=[f"{p}?{q}" for p, q in NUMBER_FILTERS])
@pytest.mark.parametrize("value", [TOO_BIG, WAY_TOO_BIG, f"-{WAY_TOO_BIG}", "1.5", "abc"])
def test_a_number_filter_refuses_what_it_cannot_read(viewer, node, path, parameter, value):
    response = viewer.get(f"/api/v1/{path}", {parameter: value})

    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    assert list(response.json()) == [parameter]


def test_a_fractional_cluster_is_refused_not_read_as_a_whole_one(viewer, node):
    # ?cluster=1.5 used to list cluster 1's GPUs.
    response = viewer.get("/api/v1/gpus", {"cluster": f"{node.cluster_id}.5"})

    assert response.status_code == 400
    assert response.json() == {"cluster": ["Enter a whole number."]}


def test_a_whole_number_still_filters(viewer, node):
    other = factories.node(factories.cluster(), factories.node_type(nics=1))

    response = viewer.get("/api/v1/gpus", {"cluster": str(node.cluster_id)})

    assert response.status_code == 200
    assert {gpu["node"] for gpu in response.json()["results"]} == {node.pk}
    assert other.pk != node.pk


@pytest.mark.parametrize("value", [TOO_BIG, "abc", "1.5"])
def test_a_foreign_key_filter_names_the_missing_row(viewer, node, value):
    response = viewer.get("/api/v1/gpus", {"node": value})

    assert response.status_code == 400
    assert response.json() == {"node": [f"{value} is not the id of any node."]}


@pytest.mark.parametrize("path", ["network-ports", "network-ports/{}/trace", "clusters", "gpus"])
def test_an_id_out_of_range_in_a_path_is_a_json_404(viewer, node, path):
    response = viewer.get("/api/v1/" + (path.format(TOO_BIG) if "{}" in path else f"{path}/{WAY_TOO_BIG}"))

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize(("path", "parameter"), [("failures", "open"), ("network-ports", "cabled")])
def test_a_boolean_filter_refuses_what_is_not_a_boolean(viewer, node, path, parameter):
    response = viewer.get(f"/api/v1/{path}", {parameter: "maybe"})

    assert response.status_code == 400
    assert response.json() == {parameter: ["Must be true or false."]}


@pytest.mark.parametrize(
    ("parameter", "value", "message"),
    [
        ("limit", "abc", "Enter a whole number."),
        ("limit", "0", "Ensure this value is greater than or equal to 1."),
        ("limit", "1001", "Ensure this value is less than or equal to 1000."),
        ("limit", TOO_BIG, "Ensure this value is less than or equal to 1000."),
        ("offset", "-1", "Ensure this value is greater than or equal to 0."),
        ("offset", "x", "Enter a whole number."),
        ("offset", WAY_TOO_BIG, "Ensure this value is less than or equal to 9223372036854775807."),
    ],
)
def test_a_page_parameter_that_is_not_a_number_in_range_is_refused(viewer, node, parameter, value, message):
    response = viewer.get("/api/v1/nodes", {parameter: value})

    assert response.status_code == 400
    assert response.json() == {parameter: [message]}


def test_a_page_beyond_the_last_is_empty(viewer, node):
    response = viewer.get("/api/v1/nodes", {"limit": "1000", "offset": str(2**63 - 1)})

    assert response.status_code == 200
    assert response.json()["results"] == []


def test_an_invalid_choice_in_a_filter_lists_the_valid_ones(viewer, node):
    response = viewer.get("/api/v1/nodes", {"lifecycle": "broken"})

    assert response.status_code == 400
    valid = ", ".join(Lifecycle.values)
    assert response.json() == {"lifecycle": [f"broken is not a valid choice; valid choices are: {valid}."]}


def test_an_invalid_choice_in_a_filter_built_from_the_model_lists_the_valid_ones(viewer, node):
    # DiscoveryChange.kind is a model field with choices, filtered through Meta.fields.
    response = viewer.get("/api/v1/discovery-changes", {"kind": "nope"})

    assert response.status_code == 400
    assert "valid choices are: " in response.json()["kind"][0]


def test_an_invalid_choice_in_a_body_lists_the_valid_ones(api_client, node):
    response = api_client(Role.ADMIN).post(
        "/api/v1/port-templates",
        {"node_type": node.node_type_id, "device_name": "mlx5_9", "kind": "token-ring", "rate_gbps": 400},
    )

    assert response.status_code == 400
    assert response.json() == {
        "kind": ['"token-ring" is not a valid choice; valid choices are: infiniband, roce, ethernet.']
    }


def test_an_invalid_choice_in_a_query_serializer_lists_the_valid_ones(viewer, node):
    response = viewer.get(f"/api/v1/nodes/{node.pk}/telemetry", {"window": "1y"})

    assert response.status_code == 400
    assert response.json() == {"window": ['"1y" is not a valid choice; valid choices are: 15m, 24h, 30d.']}


def test_a_value_a_check_constraint_refuses_is_a_400_naming_the_field(api_client, node):
    # The fuzzer's find: the database's check refused it, which the API answered as a 409 conflict.
    response = api_client(Role.ADMIN).post(
        "/api/v1/fabrics",
        {
            "name": "ib-x",
            "cluster": node.cluster_id,
            "kind": "infiniband",
            "topology": "fat_tree",
            "oversubscription_ratio": "0.50",
        },
    )

    assert response.status_code == 400
    assert list(response.json()) == ["oversubscription_ratio"]
