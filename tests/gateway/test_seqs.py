"""A node's seqs are the server's dedup: a frame at or below the stored seq is a replay. One frame must
not move them where no real frame reaches (a seq of 2**63 - 1 stopped a node's telemetry for good): a
frame more than MAX_SEQ_AHEAD past them is refused, a new credential starts a new epoch, and an admin
can reset them (API and admin site), audited, which closes the node's socket so its agent follows."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agents import protocol
from apps.accounts.models import AuditLogEntry, User
from apps.gateway.models import EnrollmentToken, GatewayCounter, NodeAgent
from apps.telemetry.cursors import stored_seqs
from apps.telemetry.models import TelemetryCursor
from tests.gateway.conftest import NOW, enrolled_node, eventually, in_db

LARGEST = 2**63 - 1


def telemetry(seq: int) -> protocol.Telemetry:
    return protocol.Telemetry(seq=seq, samples=[protocol.NodeSample(ts=NOW, gpus=[protocol.GpuSample(index=0)])])


def cursors(node) -> tuple[int, int]:
    return stored_seqs([node.pk])[node.pk]


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_seq_further_ahead_than_a_buffer_holds_is_refused_and_telemetry_goes_on(connect_agent, storage):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await agent.send(telemetry(LARGEST))
    reply = await agent.receive()
    await agent.send(protocol.Events(seq=protocol.MAX_SEQ_AHEAD + 1, events=[protocol.GpuEvent(ts=NOW, kind="xid")]))
    refused_events = await agent.receive()

    assert (reply.code, reply.seq, reply.stream) == ("invalid", LARGEST, "telemetry")
    assert reply.message == (
        f"Seq {LARGEST} is more than {protocol.MAX_SEQ_AHEAD} ahead of the 0 this server stores for the stream; "
        "an agent's buffer cannot hold that many."
    )
    assert (refused_events.code, refused_events.stream) == ("invalid", "events")
    assert (await agent.roundtrip()).seq == 1  # the next real frame is stored, not taken for a replay
    assert await storage.cursors(node) == (1, 0)
    counter = await eventually(lambda: GatewayCounter.objects.filter(node=node, code="seq_ahead").first())
    assert counter.count == 2


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_seq_as_far_ahead_as_a_buffer_holds_is_stored(connect_agent, storage):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await agent.send(telemetry(protocol.MAX_SEQ_AHEAD))

    assert await agent.receive() == protocol.Ack(stream="telemetry", seq=protocol.MAX_SEQ_AHEAD)


@pytest.mark.django_db
def test_a_new_credential_starts_a_new_epoch_of_the_nodes_seqs(admin_api, storage):
    node, _ = enrolled_node("gpu-0042")
    TelemetryCursor.objects.create(node=node, telemetry_seq=LARGEST, events_seq=7, updated_at=node.created_at)
    token = admin_api.post("/api/v1/enrollment-tokens", {"hostname": "gpu-0042"}).json()["token"]

    response = APIClient().post("/api/v1/agents/enroll", {"token": token, "hostname": "gpu-0042"})

    assert response.status_code == 201, response.content
    assert cursors(node) == (0, 0)
    entry = AuditLogEntry.objects.get(action="agent.enroll")
    assert entry.detail["previous_seqs"] == {"telemetry": LARGEST, "events": 7}
    assert EnrollmentToken.objects.get().used_by_node == node


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [({"telemetry_seq": -1}, "telemetry_seq"), ({"events_seq": 2**63}, "events_seq"), ({"reason": ""}, "reason")],
)
def test_a_reset_with_a_bad_seq_is_a_400_naming_the_field(admin_api, body, field):
    node, _ = enrolled_node()
    NodeAgent.objects.create(node=node)

    response = admin_api.post(f"/api/v1/agents/{node.pk}/reset-seqs", {"reason": "repair", **body}, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert not TelemetryCursor.objects.filter(node=node).exists()


@pytest.mark.django_db
def test_only_an_admin_resets_seqs(api_client):
    node, _ = enrolled_node()
    NodeAgent.objects.create(node=node)

    response = api_client("operator").post(f"/api/v1/agents/{node.pk}/reset-seqs", {"reason": "x"}, format="json")

    assert response.status_code == 403


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_an_admin_resets_a_nodes_seqs_over_the_api_and_its_agent_follows(connect_agent, api_client, storage):
    node, credential = await in_db(enrolled_node)()
    await storage.stored_elsewhere(node, telemetry_seq=LARGEST - 1, events_seq=3)
    agent = await connect_agent(credential, node.hostname)
    assert (await agent.hello()).last_telemetry_seq == LARGEST - 1
    admin = await in_db(api_client)("admin")

    response = await in_db(admin.post)(
        f"/api/v1/agents/{node.pk}/reset-seqs", {"telemetry_seq": 10, "reason": "a frame pinned it"}, format="json"
    )

    assert response.status_code == 200, response.content
    assert response.json() == {
        "node": node.pk,
        "hostname": node.hostname,
        "before": {"telemetry": LARGEST - 1, "events": 3},
        "after": {"telemetry": 10, "events": 0},
    }
    assert await agent.close_code() == protocol.CloseCode.SEQS_RESET == 4410
    entry = await in_db(AuditLogEntry.objects.get)(action="node.seqs_reset")
    assert (entry.actor, entry.object_id, entry.detail["reason"]) == ("admin-user", str(node.pk), "a frame pinned it")
    again = await connect_agent(credential, node.hostname)
    assert (await again.hello()).last_telemetry_seq == 10
    await again.send(telemetry(11))
    assert await again.receive() == protocol.Ack(stream="telemetry", seq=11)


@pytest.mark.django_db
def test_an_admin_resets_seqs_on_the_admin_site(settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    node, _ = enrolled_node()
    agent = NodeAgent.objects.create(node=node)
    TelemetryCursor.objects.create(node=node, telemetry_seq=LARGEST, events_seq=LARGEST, updated_at=node.created_at)
    browser = Client()
    browser.force_login(User.objects.create_superuser("root", "root@example.com", "not-used"))

    response = browser.post(
        "/admin/gateway/nodeagent/",
        {"action": "reset_seqs", "_selected_action": [agent.pk]},
        secure=True,
    )

    assert response.status_code == 302
    assert cursors(node) == (0, 0)
    entry = AuditLogEntry.objects.get(action="node.seqs_reset")
    assert (entry.actor, entry.detail["before"]) == ("root", {node.hostname: {"telemetry": LARGEST, "events": LARGEST}})
