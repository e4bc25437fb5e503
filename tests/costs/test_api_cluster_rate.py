"""GET /api/v1/costs/clusters/<id>/rate: a cluster's GPU cost per hour with its breakdown."""

import pytest

from apps.accounts.roles import Role
from apps.inventory.choices import Lifecycle
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def north(h100, owned_h100_price):
    cluster = factories.cluster("north")
    factories.node(cluster, h100, lifecycle=Lifecycle.IN_SERVICE)
    factories.node(cluster, h100, lifecycle=Lifecycle.QUARANTINED)
    factories.node(cluster, factories.node_type("mi300x", nics=0))
    return cluster


def test_it_returns_the_total_the_breakdown_and_the_notes(api_client, north, h100):
    response = api_client(Role.VIEWER).get(f"/api/v1/costs/clusters/{north.pk}/rate", {"at": "2026-03-01"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["cluster"], body["at"], body["complete"]) == ("north", "2026-03-01", False)
    assert body["total"]["value"] == "18.8224"  # 16 GPUs × 1.1764
    assert body["total"]["formula"] == "16 × 1.1764"
    assert "retired" not in body["counted_states"]
    h100_line, mi300_line = body["breakdown"]
    assert h100_line["node_type_id"] == h100.pk
    assert h100_line["nodes_by_state"] == {"in_service": 1, "quarantined": 1}
    assert h100_line["price_per_gpu_hour"]["formula"] == "(250000 / 4 + 20000) / 8766 / 8"
    assert h100_line["rate"]["inputs"] == {"nodes": 2, "gpus_per_node": 8, "gpus": 16, "price_per_gpu_hour": "1.1764"}
    assert (mi300_line["node_type"], mi300_line["price_per_gpu_hour"], mi300_line["rate"]) == ("mi300x", None, None)
    assert body["notes"][0].startswith("mi300x: no GPU price in force on 2026-03-01")


def test_it_answers_404_for_an_unknown_cluster(api_client):
    assert api_client(Role.VIEWER).get("/api/v1/costs/clusters/999999/rate").status_code == 404


def test_it_answers_400_for_a_malformed_date(api_client, north):
    response = api_client(Role.VIEWER).get(f"/api/v1/costs/clusters/{north.pk}/rate", {"at": "March"})
    assert response.status_code == 400
    assert list(response.json()) == ["at"]


def test_it_refuses_anonymous_callers(api_client, north):
    assert api_client("anonymous").get(f"/api/v1/costs/clusters/{north.pk}/rate").status_code == 401
