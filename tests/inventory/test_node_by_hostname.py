"""A node's routes take its hostname as well as its id: ``/api/v1/nodes/gpu-007``."""

import pytest

from apps.accounts.roles import Role
from apps.inventory.choices import Lifecycle
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes():
    cluster, node_type = factories.cluster(), factories.node_type(nics=0)
    return {
        name: factories.node(cluster, node_type, name, lifecycle=Lifecycle.IN_SERVICE)
        for name in ("gpu-007", "gpu-008.east.example.com")
    }


@pytest.mark.parametrize("hostname", ["gpu-007", "gpu-008.east.example.com"])
def test_it_reads_a_node_by_hostname(api_client, nodes, hostname):
    response = api_client(Role.VIEWER).get(f"/api/v1/nodes/{hostname}")

    assert response.status_code == 200, response.content
    assert response.json()["id"] == nodes[hostname].pk


def test_it_still_reads_a_node_by_id(api_client, nodes):
    response = api_client(Role.VIEWER).get(f"/api/v1/nodes/{nodes['gpu-007'].pk}")

    assert response.json()["hostname"] == "gpu-007"


def test_an_unknown_hostname_is_a_404(api_client, nodes):
    response = api_client(Role.VIEWER).get("/api/v1/nodes/gpu-999")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"


def test_it_moves_a_node_named_by_hostname(api_client, nodes):
    response = api_client(Role.OPERATOR).post("/api/v1/nodes/gpu-007/quarantine", {"reason": "XID 79 on GPU 3"})

    assert response.status_code == 200, response.content
    nodes["gpu-007"].refresh_from_db()
    assert nodes["gpu-007"].lifecycle == Lifecycle.QUARANTINED
    history = api_client(Role.VIEWER).get("/api/v1/nodes/gpu-007/history").json()
    assert [t["to_state"] for t in history["results"]] == [Lifecycle.QUARANTINED]


def test_its_telemetry_is_addressed_by_hostname_too(api_client, nodes):
    response = api_client(Role.VIEWER).get("/api/v1/nodes/gpu-008.east.example.com/telemetry")

    assert response.status_code == 200, response.content
    assert response.json()["node"] == nodes["gpu-008.east.example.com"].pk


def test_the_schema_says_a_node_path_takes_an_id_or_a_hostname(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    (parameter,) = schema["paths"]["/api/v1/nodes/{id}"]["get"]["parameters"]
    assert parameter["schema"]["type"] == "string"
