"""A node whose clock runs ahead: what it stamps more than AGENT_MAX_CLOCK_SKEW_S (5 min) ahead of the
server's clock is refused and counted, and the node gets a "clock skew" failure with the offset. (A
sample from the future would otherwise stand as its GPU's newest one, on /metrics, for good.)"""

import pytest

from agents import protocol
from apps.failures.choices import FailureKind
from apps.failures.models import Failure
from apps.gateway.consumers import AgentConsumer
from apps.gateway.models import GatewayCounter
from tests.gateway.conftest import NOW, enrolled_node, eventually, in_db

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

HOUR = 3600.0


@pytest.fixture(autouse=True)
def server_time(monkeypatch):
    """The server's wall clock reads NOW, the time the tests' agents stamp their data around."""
    monkeypatch.setattr(AgentConsumer, "wall_clock", staticmethod(lambda: NOW))


def stamped(seq: int, ts: float) -> protocol.Telemetry:
    return protocol.Telemetry(seq=seq, samples=[protocol.NodeSample(ts=ts, gpus=[protocol.GpuSample(index=0)])])


def skew_failures(node) -> list[tuple[str, str, int]]:
    return list(Failure.objects.filter(node=node, kind=FailureKind.CLOCK).values_list("title", "detail", "count"))


async def test_a_sample_from_the_future_is_refused_counted_and_raises_a_clock_skew_failure(connect_agent, storage):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await agent.send(stamped(1, NOW + HOUR))

    reply = await agent.receive()
    assert (reply.code, reply.seq, reply.stream) == ("invalid", 1, "telemetry")
    assert reply.message == (
        "Stamped 3600 s ahead of the server's clock, more than the 300 s allowed; check the node's time sync."
    )
    assert await storage.sample_times(node) == []
    counter = await eventually(lambda: GatewayCounter.objects.filter(node=node, code="clock_skew").first())
    assert (counter.count, counter.last_message) == (1, reply.message)
    assert not await in_db(GatewayCounter.objects.filter(node=node, code="invalid").exists)()
    assert await in_db(skew_failures)(node) == [
        ("Clock skew", "The node's clock is 3600.0 s ahead of the control plane's.", 1)
    ]


async def test_within_the_allowed_skew_samples_are_stored(connect_agent, storage):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await agent.send(stamped(1, NOW + 299))

    assert await agent.receive() == protocol.Ack(stream="telemetry", seq=1)
    assert await storage.sample_times(node) == [NOW + 299]
    assert await in_db(skew_failures)(node) == []


async def test_events_from_the_future_are_refused_too(connect_agent, storage):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    future = protocol.GpuEvent(ts=NOW + HOUR, kind="xid", gpu_index=0, xid=79)
    await agent.send(protocol.Events(seq=4, events=[protocol.GpuEvent(ts=NOW, kind="thermal"), future]))

    reply = await agent.receive()
    assert (reply.code, reply.seq, reply.stream) == ("invalid", 4, "events")
    assert await storage.events(node) == []


async def test_a_heartbeat_from_the_future_raises_the_failure_once_a_minute(connect_agent):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    for _ in range(3):
        await agent.send(protocol.Heartbeat(ts=NOW + 2 * HOUR))
    await agent.send(stamped(1, NOW + 3 * HOUR))
    await agent.receive()  # the refusal: every heartbeat before it has been handled

    assert await in_db(skew_failures)(node) == [
        ("Clock skew", "The node's clock is 7200.0 s ahead of the control plane's.", 1)
    ]
