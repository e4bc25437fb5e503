"""The gateway with the real telemetry storage behind it (apps.telemetry): acks are what is durably
stored, and a reconnecting agent is told where to resume."""

import pytest

from agents import protocol
from tests.gateway.conftest import NOW, enrolled_node, in_db

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def test_it_acks_what_storage_holds_and_welcomes_a_returning_agent_from_there(connect_agent):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    assert (await agent.hello()).last_telemetry_seq == 0

    await agent.send(agent.telemetry(seq=1))
    first = await agent.receive()
    await agent.send(agent.telemetry(seq=2))
    second = await agent.receive()
    await agent.send(agent.telemetry(seq=1))  # replayed after a lost ack
    replay = await agent.receive()
    await agent.send(protocol.Events(seq=5, events=[protocol.GpuEvent(ts=NOW, kind="xid", gpu_index=0, xid=31)]))
    events = await agent.receive()

    assert [first, second, replay, events] == [
        protocol.Ack(stream="telemetry", seq=1),
        protocol.Ack(stream="telemetry", seq=2),
        protocol.Ack(stream="telemetry", seq=2),
        protocol.Ack(stream="events", seq=5),
    ]
    returning = await connect_agent(credential, node.hostname)
    welcome = await returning.hello()
    assert (welcome.last_telemetry_seq, welcome.last_events_seq) == (2, 5)
