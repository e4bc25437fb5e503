"""What each agent says of its buffer (in Hello and every Heartbeat) reaches /metrics: the samples it
holds for the control plane and those it lost from a full buffer, written only when they change."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents import protocol
from apps.gateway import bookkeeping
from apps.gateway.bookkeeping import Bookkeeper
from apps.gateway.models import NodeAgent
from tests.gateway.conftest import NOW, enrolled_node, eventually, in_db
from tests.prometheus import scrape, series

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def buffer_of(node) -> tuple[int, int]:
    return NodeAgent.objects.values_list("buffered_samples", "dropped_samples").get(node=node)


async def test_the_agents_buffer_reaches_metrics_from_hello_and_heartbeats(connect_agent):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello(buffered_samples=600, dropped_samples=3)
    assert await eventually(lambda: buffer_of(node) == (600, 3))

    await agent.send(protocol.Heartbeat(ts=NOW, buffered_samples=0, dropped_samples=5))

    assert await eventually(lambda: buffer_of(node) == (0, 5))
    parsed = await in_db(scrape)()
    assert series(parsed, "controlplane_agent_buffered_samples", "Hostname") == {(node.hostname,): 0}
    assert series(parsed, "controlplane_agent_dropped_samples_total", "Hostname") == {(node.hostname,): 5}
    assert parsed["controlplane_agent_dropped_samples_total"].type == "counter"


async def test_a_bookkeeper_writes_a_buffer_only_when_it_changed(agent_node):
    node = agent_node
    keeper = Bookkeeper()
    keeper.agent_buffer(node.pk, 10, 0, hello=True)
    await keeper.flush()
    first = await in_db(NodeAgent.objects.values_list("buffer_reported_at", flat=True).get)(node=node)
    keeper.agent_buffer(node.pk, 10, 0)  # the same again: nothing to write
    await keeper.flush()
    assert await in_db(NodeAgent.objects.values_list("buffer_reported_at", flat=True).get)(node=node) == first
    keeper.agent_buffer(node.pk, 10, 0, hello=True)  # after a Hello it is written whatever it says
    await keeper.flush()
    assert await in_db(NodeAgent.objects.values_list("buffer_reported_at", flat=True).get)(node=node) > first
    assert await in_db(buffer_of)(node) == (10, 0)


@pytest.fixture
def agent_node(db):
    node, _ = enrolled_node()
    NodeAgent.objects.get_or_create(node=node)
    return node


async def test_a_bookkeepers_write_locks_the_agent_records_in_node_order_first(db):
    """As the Hellos' upsert locks them (admission.py): in any other order the two deadlock."""
    statements = await in_db(write_buffers_of_three_nodes)()
    assert statements[0].startswith("SELECT")
    assert statements[0].removesuffix(" FOR UPDATE").endswith("ORDER BY 1 ASC")  # by node_id, the one column
    assert statements[1].startswith("WITH v ")  # one UPDATE from a VALUES list
    assert " UPDATE " in statements[1]
    if connection.vendor == "postgresql":
        assert "FOR UPDATE" in statements[0]


def write_buffers_of_three_nodes() -> list[str]:
    """The bookkeeper's statements on agent records, writing three nodes' buffers listed backwards."""
    nodes = [enrolled_node()[0] for _ in range(3)]
    for node in nodes:
        NodeAgent.objects.get_or_create(node=node)
    buffers = {node.pk: (1, 0) for node in reversed(nodes)}
    with CaptureQueriesContext(connection) as captured:
        bookkeeping._write(set(), {}, buffers, set(), timezone.now())
    return [q["sql"] for q in captured.captured_queries if '"gateway_nodeagent"' in q["sql"]]
