"""The agent socket over a real server and the real storage: authentication, credential scoping, the
Hello/Welcome handshake, acks of what is stored, and one socket per node."""

import asyncio

import pytest
from channels.layers import get_channel_layer

from agents import protocol
from apps.accounts.models import AuditLogEntry
from apps.gateway.models import GatewayCounter, NodeAgent
from apps.gateway.push import agent_group
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from tests.gateway.conftest import NOW, enrolled_node, eventually, in_db

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def test_it_welcomes_an_agent_with_the_seqs_already_stored(connect_agent, storage):
    node, credential = await in_db(enrolled_node)("gpu-0001")
    await storage.stored_elsewhere(node, telemetry_seq=41, events_seq=7)
    agent = await connect_agent(credential, "gpu-0001")

    welcome = await agent.hello(simulated=True)

    assert welcome == protocol.Welcome(
        node_id=node.pk, hostname="gpu-0001", telemetry_interval_s=1, last_telemetry_seq=41, last_events_seq=7
    )
    node_agent = await in_db(NodeAgent.objects.get)(node=node)
    assert (node_agent.agent_version, node_agent.simulated, node_agent.connected) == ("test", True, True)
    await in_db(node.refresh_from_db)()
    assert node.liveness == Liveness.ONLINE


async def test_it_acks_telemetry_and_events_with_the_highest_stored_seq(connect_agent, storage):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()
    events = protocol.Events(seq=2, events=[protocol.GpuEvent(ts=NOW, kind="xid", gpu_index=3, xid=79)])

    await agent.send(agent.telemetry(seq=5))
    assert await agent.receive() == protocol.Ack(stream="telemetry", seq=5)
    await agent.send(agent.telemetry(seq=3))  # a replayed sample the server already has
    assert await agent.receive() == protocol.Ack(stream="telemetry", seq=5)
    await agent.send(events)
    assert await agent.receive() == protocol.Ack(stream="events", seq=2)
    await agent.send(events)  # replayed after a lost ack
    assert await agent.receive() == protocol.Ack(stream="events", seq=2)

    assert await storage.sample_times(node) == [NOW + 5]
    assert await storage.events(node) == [("xid", 3, 79)]
    assert await storage.cursors(node) == (5, 2)


async def test_it_drops_a_replay_of_what_another_server_process_stored(connect_agent, storage):
    # This process has never seen the node: only the stored cursor tells a replay from new data.
    node, credential = await in_db(enrolled_node)()
    await storage.stored_elsewhere(node, telemetry_seq=41, events_seq=7)
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await agent.send(agent.telemetry(seq=41))  # its ack was lost with the other server's socket
    replayed = await agent.receive()
    await agent.send(agent.telemetry(seq=42))
    new = await agent.receive()
    await agent.send(protocol.Events(seq=7, events=[protocol.GpuEvent(ts=NOW, kind="xid", gpu_index=0, xid=31)]))
    replayed_events = await agent.receive()

    assert [replayed, new, replayed_events] == [
        protocol.Ack(stream="telemetry", seq=41),
        protocol.Ack(stream="telemetry", seq=42),
        protocol.Ack(stream="events", seq=7),
    ]
    assert await storage.sample_times(node) == [NOW + 42]
    assert await storage.events(node) == []
    assert await storage.cursors(node) == (42, 7)


@pytest.mark.parametrize(
    ("header", "counted"),
    [
        (None, "missing credential"),
        ("cpn_0123456789ab_not-the-secret", "invalid or revoked credential"),
        ("cpt_0123456789ab_an-api-token-is-not-a-node-credential", "invalid or revoked credential"),
    ],
)
async def test_it_refuses_a_connection_without_a_valid_credential(connect_agent, header, counted):
    agent = await connect_agent(header)

    assert await agent.close_code() == protocol.CloseCode.UNAUTHORIZED
    counter = await eventually(lambda: GatewayCounter.objects.filter(node=None, code="unauthorized").first())
    assert counter.count == 1
    assert counted in counter.last_message


async def test_it_refuses_a_revoked_credential_on_connect(connect_agent):
    node, credential = await in_db(enrolled_node)()
    await in_db(lambda: node.credentials.get().revoke())()

    agent = await connect_agent(credential)

    assert await agent.close_code() == protocol.CloseCode.UNAUTHORIZED


async def test_it_closes_a_live_socket_when_an_admin_revokes_its_credential(connect_agent, admin_api):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()
    credential_id = await in_db(lambda: node.credentials.get().pk)()

    response = await in_db(admin_api.post)(f"/api/v1/node-credentials/{credential_id}/revoke")

    assert response.status_code == 200, response.content
    reply = await agent.receive()
    assert isinstance(reply, protocol.Error)
    assert reply.code == "forbidden"
    assert await agent.close_code() == protocol.CloseCode.UNAUTHORIZED


async def test_it_finds_a_revocation_on_the_next_message_even_without_the_push(connect_agent, storage):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()
    await in_db(lambda: node.credentials.get().revoke())()  # straight in the database: no channel-layer push

    await eventually(lambda: True)  # the next bookkeeping tick reads the revocation
    await agent.send(agent.telemetry())

    reply = await agent.receive()
    assert (reply.code, reply.message) == ("forbidden", "This credential was revoked; enroll the node again.")
    assert await agent.close_code() == protocol.CloseCode.UNAUTHORIZED
    assert await storage.sample_times(node) == []


@pytest.mark.parametrize("message", ["hello", "inventory"])
async def test_it_refuses_and_audits_a_node_speaking_for_another(connect_agent, message):
    node_a, credential_a = await in_db(enrolled_node)("gpu-000a")
    node_b, _ = await in_db(enrolled_node)("gpu-000b")
    agent = await connect_agent(credential_a, "gpu-000a")
    if message == "hello":
        await agent.send(protocol.Hello(protocol=1, agent_version="x", hostname="gpu-000b"))
    else:
        await agent.hello()
        await agent.send(protocol.Inventory(host=protocol.HostFacts(hostname="gpu-000b"), gpus=[], ports=[]))

    reply = await agent.receive()

    assert reply.code == "forbidden"
    assert f"speaks for gpu-000a only; refused {message} as gpu-000b" in reply.message
    assert await agent.close_code() == protocol.CloseCode.FORBIDDEN
    entry = await in_db(AuditLogEntry.objects.get)(action="agent.impersonation")
    assert (entry.actor, entry.object_id, entry.detail["claimed_hostname"]) == (
        "agent:gpu-000a",
        str(node_a.pk),
        "gpu-000b",
    )
    await in_db(node_b.refresh_from_db)()
    assert node_b.liveness == Liveness.UNKNOWN
    assert not await in_db(NodeAgent.objects.filter(node=node_b).exists)()
    assert await eventually(lambda: GatewayCounter.objects.filter(node=node_a, code="forbidden", count=1).exists())


async def test_it_closes_the_older_socket_when_the_node_connects_again(connect_agent):
    node, credential = await in_db(enrolled_node)()
    first = await connect_agent(credential, node.hostname)
    await first.hello()

    second = await connect_agent(credential, node.hostname)
    await second.hello()

    assert await first.close_code() == protocol.CloseCode.SUPERSEDED
    assert (await second.roundtrip()).seq == 1
    assert await in_db(lambda: NodeAgent.objects.get(node=node).connected)()


async def test_an_abandoned_earlier_connection_does_not_close_the_one_that_replaced_it(connect_agent):
    # The agent gave up on a connection whose Welcome was slow and connected again; the server finishes
    # the first Hello after the second and announces it late.
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()
    hello_at = await in_db(lambda: NodeAgent.objects.get(node=node).connected_at.timestamp())()

    announce = get_channel_layer().group_send
    await announce(agent_group(node.pk), {"type": "agent.superseded", "by": "specific.old!1", "hello_at": hello_at - 5})
    assert (await agent.roundtrip()).seq == 1

    await announce(agent_group(node.pk), {"type": "agent.superseded", "by": "specific.new!1", "hello_at": hello_at + 5})
    assert await agent.close_code() == protocol.CloseCode.SUPERSEDED


async def test_it_refuses_a_protocol_version_it_does_not_speak(connect_agent):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)

    reply = await agent.hello(protocol=2)

    assert (reply.code, reply.message) == ("protocol_version", "This server speaks protocol 1, not 2.")
    assert await agent.close_code() == 4426


async def test_it_marks_the_node_online_and_seen_on_heartbeats(connect_agent):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()
    # The liveness sweep found it silent since: only what the agent says next can bring it back.
    await in_db(lambda: Node.objects.filter(pk=node.pk).update(liveness=Liveness.UNREACHABLE, last_seen_at=None))()

    await agent.send(protocol.Heartbeat(ts=NOW))

    await eventually(lambda: Node.objects.get(pk=node.pk).last_seen_at)
    await in_db(node.refresh_from_db)()
    assert (node.liveness, node.last_seen_at is not None) == (Liveness.ONLINE, True)
    recovered = AuditLogEntry.objects.filter(action="node.recovered", object_id=str(node.pk))
    assert await in_db(recovered.count)() == 1


async def test_it_keeps_an_idle_socket_open_past_the_channel_layers_blocking_read(connect_agent):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await asyncio.sleep(6)  # channels_redis blocks 5 s per read of the consumer's channel

    assert (await agent.roundtrip()).seq == 1
