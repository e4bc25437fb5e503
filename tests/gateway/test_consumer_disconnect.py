"""An agent that disconnects before its reply is not an error: the reply is simply dropped. A consumer that
ends, however it ends, leaves nothing of its connection behind."""

import asyncio
import logging

import pytest
from channels.layers import get_channel_layer

from agents import protocol
from apps.gateway.bookkeeping import bookkeeper
from apps.gateway.consumers import AgentConsumer
from apps.gateway.models import NodeAgent
from apps.gateway.push import agent_group
from tests.gateway.conftest import enrolled_node, eventually, in_db


class _Gone:
    hostname = "gpu-001"


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
    with caplog.at_level(logging.DEBUG, logger="apps.gateway.consumers"):
        asyncio.run(consumer._send(protocol.Ack(stream="telemetry", seq=7)))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "disconnected before its Ack" in caplog.text


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
