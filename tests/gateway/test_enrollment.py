"""Enrollment: an admin's one-time, expiring token becomes a node credential, once; every refusal
looks the same to the caller and is explained in the audit log."""

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.gateway.api.views import ENROLLMENT_REFUSED
from apps.gateway.models import EnrollmentToken, NodeAgent, NodeCredential
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node, NodeTransition
from tests import factories

pytestmark = pytest.mark.django_db

ENROLL = "/api/v1/agents/enroll"


@pytest.fixture
def place():
    return {"cluster": factories.cluster("training"), "node_type": factories.node_type("hgx-h100", nics=2)}


def issue(admin_api, **fields) -> str:
    body = {key: getattr(value, "pk", value) for key, value in fields.items()}
    response = admin_api.post("/api/v1/enrollment-tokens", body)
    assert response.status_code == 201, response.content
    return response.json()["token"]


def enroll(token: str, hostname: str = "gpu-0042", address: str = "127.0.0.1", **facts):
    return APIClient(REMOTE_ADDR=address).post(ENROLL, {"token": token, "hostname": hostname, **facts})


def test_it_shows_the_secret_once_and_stores_only_its_digest(admin_api, place):
    response = admin_api.post(
        "/api/v1/enrollment-tokens", {"cluster": place["cluster"].pk, "node_type": place["node_type"].pk}
    )

    assert response.status_code == 201, response.content
    body = response.json()
    secret = body["token"]
    row = EnrollmentToken.objects.get()
    assert secret.startswith(body["key_prefix"])
    assert body["key_prefix"] == f"cpe_{row.key_id}_"
    assert row.secret_hash == hashlib.sha256(secret.split("_", 2)[2].encode()).hexdigest()
    assert secret not in str(EnrollmentToken.objects.values().get())
    assert "token" not in admin_api.get(f"/api/v1/enrollment-tokens/{row.pk}").json()
    assert abs(row.expires_at - (timezone.now() + timedelta(hours=24))) < timedelta(seconds=5)
    assert (body["state"], body["created_by"]) == ("usable", "admin-user")
    entry = AuditLogEntry.objects.get(action="enrollment_token.create")
    assert (entry.actor, entry.object_id, entry.status_code) == ("admin-user", str(row.pk), 201)


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "cluster", "A token for any new node: give the cluster and node type to create it in."),
        (
            {"hostname": "gpu-9999"},
            "cluster",
            "No node is named gpu-9999: give the cluster and node type to create it in.",
        ),
        ({"hostname": "not a hostname!"}, "hostname", "Not a valid hostname."),
        ({"expires_at": "2020-01-01T00:00:00Z", "with_place": True}, "expires_at", "The expiry must be in the future."),
        ({"cluster_only": True}, "node_type", "Give the cluster and the node type together, or neither."),
    ],
)
def test_it_refuses_a_token_it_could_not_honour(admin_api, place, body, field, message):
    if body.pop("with_place", False):
        body |= {"cluster": place["cluster"].pk, "node_type": place["node_type"].pk}
    if body.pop("cluster_only", False):
        body["cluster"] = place["cluster"].pk

    response = admin_api.post("/api/v1/enrollment-tokens", body)

    assert response.status_code == 400
    assert message in response.json()[field][0]
    assert not EnrollmentToken.objects.exists()


def test_it_creates_a_new_node_and_its_credential(admin_api, place):
    token = issue(admin_api, **place)

    response = enroll(token, "gpu-0042", agent_version="0.1.0", driver_version="550.54.15", cpu_count=224)

    assert response.status_code == 201, response.content
    body = response.json()
    node = Node.objects.get(hostname="gpu-0042")
    assert body == {
        "node_id": node.pk,
        "hostname": "gpu-0042",
        "credential": body["credential"],
        "server_ws_url": "ws://testserver/ws/agent",
    }
    credential = NodeCredential.authenticate(body["credential"])
    assert credential is not None
    assert credential.node == node
    assert (node.lifecycle, node.cluster, node.node_type) == (Lifecycle.NEW, place["cluster"], place["node_type"])
    assert node.ports.count() == 2  # instantiated from the node type
    transition = NodeTransition.objects.get(node=node)
    assert (transition.from_state, transition.to_state, transition.actor) == ("", Lifecycle.NEW, "agent:gpu-0042")
    agent = NodeAgent.objects.get(node=node)
    assert (agent.agent_version, agent.host) == (
        "0.1.0",
        {"hostname": "gpu-0042", "driver_version": "550.54.15", "cpu_count": 224},
    )
    used = EnrollmentToken.objects.get()
    assert (used.state, used.used_by_node) == ("used", node)
    entry = AuditLogEntry.objects.get(action="agent.enroll")
    assert (entry.actor, entry.object_id, entry.detail["created_node"]) == ("agent:gpu-0042", str(node.pk), True)
    assert entry.detail["credential"] == credential.key_id


def test_it_is_one_time(admin_api, place):
    token = issue(admin_api, **place)
    assert enroll(token, "gpu-0042").status_code == 201

    second = enroll(token, "gpu-0043")

    assert (second.status_code, second.json()) == (403, {"detail": ENROLLMENT_REFUSED})
    assert not Node.objects.filter(hostname="gpu-0043").exists()
    assert NodeCredential.objects.count() == 1
    refused = AuditLogEntry.objects.get(action="agent.enroll_request", status_code=403)
    assert refused.detail == {"hostname": "gpu-0043", "refused": "token used"}


def test_it_cannot_be_used_twice_even_by_requests_that_both_saw_it_unused(admin_api, place, monkeypatch):
    token = issue(admin_api, **place)
    seen_unused = EnrollmentToken.objects.get()  # what a second, concurrent request read before the first won
    assert enroll(token, "gpu-0042").status_code == 201
    monkeypatch.setattr(EnrollmentToken, "find", classmethod(lambda cls, presented: seen_unused))

    second = enroll(token, "gpu-0043")

    assert second.status_code == 403
    assert (
        AuditLogEntry.objects.get(status_code=403).detail["refused"] == "token used or revoked by a concurrent request"
    )
    assert list(Node.objects.values_list("hostname", flat=True)) == ["gpu-0042"]


def test_it_refuses_an_expired_token(admin_api, place):
    token = issue(admin_api, **place)
    EnrollmentToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    response = enroll(token)

    assert (response.status_code, response.json()) == (403, {"detail": ENROLLMENT_REFUSED})
    assert AuditLogEntry.objects.get(status_code=403).detail["refused"] == "token expired"


@pytest.mark.parametrize(
    "presented",
    ["cpe_000000000000_guessed", "WRONG", "cpn_abc_a-credential-is-not-an-enrollment-token", "{key}_tampered"],
)
def test_it_refuses_a_wrong_token_with_the_same_answer(admin_api, place, presented):
    real = issue(admin_api, **place)
    presented = presented.format(key=real)

    response = enroll(presented)

    assert (response.status_code, response.json()) == (403, {"detail": ENROLLMENT_REFUSED})
    assert EnrollmentToken.objects.get().state == "usable"
    assert AuditLogEntry.objects.get(status_code=403).detail["refused"] == "no token matches"


def test_it_refuses_a_revoked_token(admin_api, place):
    token = issue(admin_api, **place)
    assert admin_api.post(f"/api/v1/enrollment-tokens/{EnrollmentToken.objects.get().pk}/revoke").status_code == 200

    assert enroll(token).status_code == 403


def test_a_token_for_one_host_does_not_enroll_another_and_stays_usable(admin_api, place):
    token = issue(admin_api, hostname="gpu-0042", **place)

    assert enroll(token, "gpu-0043").status_code == 403
    assert EnrollmentToken.objects.get().state == "usable"
    assert enroll(token, "gpu-0042").status_code == 201


def test_a_token_for_any_new_node_does_not_take_over_an_existing_one(admin_api, place):
    factories.node(place["cluster"], place["node_type"], "gpu-0042")
    token = issue(admin_api, **place)

    response = enroll(token, "gpu-0042")

    assert response.status_code == 403
    assert not NodeCredential.objects.exists()
    assert EnrollmentToken.objects.get().state == "usable"


def test_re_enrolling_a_node_binds_to_it_and_revokes_its_earlier_credentials(admin_api, place):
    node = factories.node(place["cluster"], place["node_type"], "gpu-0042")
    earlier, earlier_secret = NodeCredential.issue(node)
    token = issue(admin_api, hostname="gpu-0042")

    response = enroll(token, "gpu-0042")

    assert response.status_code == 201, response.content
    assert response.json()["node_id"] == node.pk
    assert NodeCredential.authenticate(earlier_secret) is None
    assert NodeCredential.authenticate(response.json()["credential"]).node == node
    assert AuditLogEntry.objects.get(action="agent.enroll").detail["revoked_credentials"] == [earlier.key_id]
    assert not NodeTransition.objects.filter(node=node).exists()  # an existing node keeps its lifecycle


def test_it_refuses_to_enroll_a_retired_node(admin_api, place):
    node = factories.node(place["cluster"], place["node_type"], "gpu-0042")
    token = issue(admin_api, hostname="gpu-0042")
    node.transition(Lifecycle.QUARANTINED, actor="t", reason="RMA")
    node.transition(Lifecycle.RETIRED, actor="t", reason="RMA")

    assert enroll(token, "gpu-0042").status_code == 403
    assert AuditLogEntry.objects.get(status_code=403).detail["refused"] == "gpu-0042 is retired"


def test_it_names_a_bad_field_of_the_enrollment_request(admin_api, place):
    token = issue(admin_api, **place)

    response = enroll(token, "gpu 42", cpu_count=0)

    assert response.status_code == 400
    assert set(response.json()) == {"hostname", "cpu_count"}
    assert EnrollmentToken.objects.get().state == "usable"


def test_it_needs_no_user_and_ignores_a_stray_api_token(admin_api, place, settings):
    settings.AGENT_WS_URL = "wss://cp.example.com/ws/agent"
    token = issue(admin_api, **place)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer cpt_revoked_or_bogus")

    response = client.post(ENROLL, {"token": token, "hostname": "gpu-0042"})

    assert response.status_code == 201, response.content
    assert response.json()["server_ws_url"] == "wss://cp.example.com/ws/agent"


def test_it_refuses_to_revoke_a_token_already_used(admin_api, place):
    token = issue(admin_api, **place)
    enroll(token)

    response = admin_api.post(f"/api/v1/enrollment-tokens/{EnrollmentToken.objects.get().pk}/revoke")

    assert response.status_code == 409
    assert "used by gpu-0042" in response.json()["detail"]


@pytest.mark.parametrize("role", ["anonymous", Role.VIEWER, Role.OPERATOR])
def test_only_admins_handle_enrollment_tokens(api_client, place, role):
    client = api_client(role)

    assert client.get("/api/v1/enrollment-tokens").status_code in (401, 403)
    created = client.post(
        "/api/v1/enrollment-tokens", {"cluster": place["cluster"].pk, "node_type": place["node_type"].pk}
    )
    assert created.status_code in (401, 403)
    assert not EnrollmentToken.objects.exists()


# Throttled by address: wrong tokens cannot be tried, nor written to the audit log, at line rate ----

GUESSER = "203.0.113.20"


def test_refused_enrollments_lock_the_address_out_and_share_two_audit_rows(admin_api, place):
    token = issue(admin_api, **place)
    AuditLogEntry.objects.all().delete()

    answers = [enroll(f"cpe_0123abcd_guess{n}", address=GUESSER).status_code for n in range(25)]
    locked = enroll(token, address=GUESSER)  # even the right token, until the lockout ends

    assert answers == [403] * 10 + [429] * 15
    assert locked.status_code == 429
    assert 14 * 60 < int(locked["Retry-After"]) <= 15 * 60
    assert locked.json()["detail"] == "Too many refused enrollments from this address: try again in 15 minutes."
    assert sorted(AuditLogEntry.objects.values_list("action", "status_code", "count", "remote_addr")) == [
        ("agent.enroll_request", 403, 10, GUESSER),
        ("agent.enroll_throttled", 429, 16, GUESSER),
    ]
    assert not Node.objects.filter(hostname="gpu-0042").exists()


def test_another_address_still_enrolls_while_one_is_locked_out(admin_api, place):
    token = issue(admin_api, **place)
    for n in range(10):
        enroll(f"cpe_0123abcd_guess{n}", address=GUESSER)

    assert enroll(token, address="203.0.113.21").status_code == 201


def test_successful_enrollments_never_count_against_an_address(admin_api, place):
    """A fleet enrolls from behind one address (a NAT, the simulator): more nodes than the limit."""
    tokens = [issue(admin_api, **place) for _ in range(12)]

    answers = [enroll(token, hostname=f"gpu-{n:04d}").status_code for n, token in enumerate(tokens)]

    assert answers == [201] * 12
