"""While an agent's telemetry waits for the database, its socket is still read (apps/gateway/store_pipeline.py):
uvicorn reads a socket only when the consumer asks for the next frame, and a consumer that awaited each
frame's store left the agent's pings unanswered until the keepalive timeout closed the socket."""

import asyncio
from collections.abc import Iterator

import pytest

from agents import protocol
from apps.gateway import sinks
from tests.gateway.conftest import enrolled_node, in_db

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def held_storage(monkeypatch: pytest.MonkeyPatch) -> Iterator[asyncio.Event]:
    """The telemetry store, held until the event is set: a database busy with a fleet's writes."""
    real, gate = sinks.store_telemetry, asyncio.Event()

    async def held(node_id: int, message: protocol.Telemetry) -> int:
        await gate.wait()
        return await real(node_id, message)

    monkeypatch.setattr(sinks, "store_telemetry", held)
    yield gate
    gate.set()


async def test_a_socket_whose_telemetry_waits_for_the_database_still_answers_pings(connect_agent, held_storage):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    for _ in range(3):
        await agent.send(agent.telemetry())
    pong = await agent.socket.ping()
    await asyncio.wait_for(pong, timeout=5)
    await agent.socket.send(b"binary")  # refused, and answered while the frames before it wait
    refused = await agent.receive()
    held_storage.set()
    acks = [await agent.receive() for _ in range(3)]

    assert isinstance(refused, protocol.Error)
    assert refused.code == "malformed"
    seqs = [ack.seq for ack in acks if isinstance(ack, protocol.Ack) and ack.stream == "telemetry"]
    assert len(seqs) == 3
    assert seqs == sorted(seqs)  # each the highest seq stored when its batch was committed
    assert seqs[-1] == 3
