"""Who may read and change what the gateway keeps: credentials are an admin's business; discovery
changes, agents and error counters are for every viewer."""

import pytest

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.gateway.choices import ChangeKind
from apps.gateway.models import DiscoveryChange, GatewayCounter, NodeAgent, NodeCredential
from tests.gateway.conftest import enrolled_node

pytestmark = pytest.mark.django_db

REFUSED = (401, 403)


@pytest.fixture
def node():
    node, _ = enrolled_node("gpu-0007")
    NodeAgent.objects.create(node=node, agent_version="0.1.0", host={"hostname": "gpu-0007", "kernel": "6.8"})
    DiscoveryChange.objects.create(node=node, kind=ChangeKind.GPU_SWAPPED, subject="gpu3", detail={"index": 3})
    GatewayCounter.objects.create(node=node, code="malformed", count=3)
    return node


@pytest.mark.parametrize(
    ("path", "first_field"),
    [
        ("/api/v1/discovery-changes", ("subject", "gpu3")),
        ("/api/v1/gateway-errors", ("count", 3)),
        ("/api/v1/agents", ("agent_version", "0.1.0")),
    ],
)
def test_every_viewer_reads_what_discovery_and_the_gateway_recorded(api_client, node, path, first_field):
    assert api_client("anonymous").get(path).status_code in REFUSED

    response = api_client(Role.VIEWER).get(path)

    assert response.status_code == 200
    row = response.json()["results"][0]
    assert row["hostname"] == "gpu-0007"
    assert row[first_field[0]] == first_field[1]


@pytest.mark.parametrize("path", ["/api/v1/discovery-changes", "/api/v1/gateway-errors", "/api/v1/agents"])
def test_nobody_writes_what_discovery_and_the_gateway_recorded(api_client, node, path):
    admin = api_client(Role.ADMIN)

    assert admin.post(path, {}).status_code == 405
    assert admin.delete(f"{path}/1").status_code == 405


def test_it_filters_discovery_changes_by_kind_and_node(api_client, node):
    other, _ = enrolled_node("gpu-0008")
    DiscoveryChange.objects.create(node=other, kind=ChangeKind.PORT_REMOVED, subject="mlx5_3/1")
    viewer = api_client(Role.VIEWER)

    by_kind = viewer.get("/api/v1/discovery-changes?kind=port_removed").json()["results"]
    by_host = viewer.get("/api/v1/discovery-changes?hostname=gpu-0007").json()["results"]

    assert [(row["hostname"], row["subject"]) for row in by_kind] == [("gpu-0008", "mlx5_3/1")]
    assert [(row["hostname"], row["subject"]) for row in by_host] == [("gpu-0007", "gpu3")]


@pytest.mark.parametrize("role", ["anonymous", Role.VIEWER, Role.OPERATOR])
def test_only_admins_see_and_revoke_node_credentials(api_client, node, role):
    credential = node.credentials.get()
    client = api_client(role)

    assert client.get("/api/v1/node-credentials").status_code in REFUSED
    assert client.post(f"/api/v1/node-credentials/{credential.pk}/revoke").status_code in REFUSED
    credential.refresh_from_db()
    assert credential.revoked_at is None


def test_an_admin_revokes_a_credential_and_the_audit_log_says_so(admin_api, node, redis_channel_layer):
    credential = node.credentials.get()

    listed = admin_api.get("/api/v1/node-credentials?hostname=gpu-0007").json()["results"]
    response = admin_api.post(f"/api/v1/node-credentials/{credential.pk}/revoke")

    assert [(row["key_prefix"], row["is_usable"]) for row in listed] == [(f"cpn_{credential.key_id}_", True)]
    assert response.status_code == 200
    assert response.json()["is_usable"] is False
    assert NodeCredential.objects.usable().count() == 0
    entry = AuditLogEntry.objects.get(action="node_credential.revoke")
    assert (entry.actor, entry.object_id, entry.detail) == ("admin-user", str(credential.pk), {"hostname": "gpu-0007"})
    assert admin_api.post("/api/v1/node-credentials", {}).status_code == 405  # only enrollment creates them
    assert admin_api.get("/api/v1/node-credentials?revoked=true").json()["count"] == 1
