"""An agent that disconnects before its reply is not an error: the reply is simply dropped. A consumer that
ends, however it ends, leaves nothing of its connection behind."""

import asyncio
import logging

import pytest
from channels.layers import get_channel_layer

from agents import protocol
from apps.core.websockets import AFTER_CLOSE
from apps.gateway.bookkeeping import bookkeeper
from apps.gateway.consumers import AgentConsumer
from apps.gateway.models import NodeAgent, NodeCredential
from apps.gateway.push import agent_group
from tests.gateway.conftest import enrolled_node, eventually, in_db


class _Gone:
    pk, hostname = 1, "gpu-001"


@pytest.mark.parametrize(
    "gone",
    [
        ConnectionResetError("client disconnected"),  # uvicorn's ClientDisconnected is an OSError
        # uvicorn's websockets-sansio protocol, after it failed the socket on a keepalive timeout
        RuntimeError("Unexpected ASGI message 'websocket.send', after sending 'websocket.close'."),
    ],
)
def test_a_reply_to_an_agent_that_went_away_is_dropped_quietly(caplog, gone):
    consumer = AgentConsumer()
    consumer.node = _Gone()

    async def disconnected(**kwargs: object) -> None:
        raise gone

    consumer.send = disconnected
    with caplog.at_level(logging.DEBUG, logger="apps.gateway.connection"):
        asyncio.run(consumer._send(protocol.Ack(stream="telemetry", seq=7)))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "disconnected before its Ack" in caplog.text


@pytest.mark.parametrize("gone", [ConnectionResetError("client disconnected"), RuntimeError(f"... {AFTER_CLOSE}.")])
def test_closing_a_socket_whose_agent_went_away_is_quiet(caplog, gone):
    """A superseded socket, typically: its agent is on the new one already."""
    consumer = AgentConsumer()
    consumer.remote_addr = "10.0.0.7"

    async def disconnected(**kwargs: object) -> None:
        raise gone

    consumer.close = disconnected
    with caplog.at_level(logging.DEBUG, logger="apps.gateway.connection"):
        asyncio.run(consumer._close(protocol.CloseCode.SUPERSEDED, "A newer connection of this node took over."))
    assert consumer.closing
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "had gone before its close" in caplog.text


class _Layer:
    async def group_discard(self, group: str, channel: str) -> None:
        pass


def test_a_connection_that_ends_drops_its_queued_inventory_instead_of_waiting_for_it():
    """A server stopping with a fleet connected had hundreds of inventories queued on their thread:
    consumers waiting for theirs outlasted the shutdown's grace. The agent sends it again next time."""
    consumer = AgentConsumer()
    consumer.credential, consumer.node = NodeCredential(pk=1), _Gone()
    consumer.channel_layer, consumer.channel_name = _Layer(), "specific.a!1"

    async def end_with_an_inventory_queued() -> asyncio.Task[None]:
        consumer.discovery = asyncio.create_task(asyncio.Event().wait())  # queued behind other nodes'
        await consumer._clean_up()
        return consumer.discovery

    assert asyncio.run(end_with_an_inventory_queued()).cancelled()


def test_other_send_errors_still_surface():
    consumer = AgentConsumer()
    consumer.node = _Gone()

    async def broken(**kwargs: object) -> None:
        raise RuntimeError("a bug")

    consumer.send = broken
    with pytest.raises(RuntimeError):
        asyncio.run(consumer._send(protocol.Ack(stream="telemetry", seq=7)))


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_consumer_that_fails_is_cleaned_up_like_one_whose_agent_left(connect_agent, monkeypatch):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()
    layer = get_channel_layer()
    members = layer._group_key(agent_group(node.pk))  # where channels_redis keeps a group's members
    redis = layer.connection(layer.consistent_hash(agent_group(node.pk)))
    assert await redis.zcard(members) == 1

    async def broken(self: AgentConsumer, event: dict[str, object]) -> None:
        raise RuntimeError("a bug in a handler")

    monkeypatch.setattr(AgentConsumer, "credential_revoked", broken)
    await layer.group_send(agent_group(node.pk), {"type": "credential.revoked", "credential_id": 0})

    assert await agent.close_code() == 1011  # the server's "internal error"
    assert await eventually(lambda: not NodeAgent.objects.get(node=node).connected)
    assert await redis.zcard(members) == 0
    assert bookkeeper()._connections == {}
