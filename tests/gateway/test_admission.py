"""The database work of agents' connections, batched (apps/gateway/admission.py): a batch of any size
costs the same few queries, each agent gets its own answer, and nothing of one agent lands on another.
Then a fleet connecting at once over the real socket."""

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents import protocol
from apps.gateway import admission
from apps.gateway.models import NodeAgent, NodeCredential
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from apps.telemetry.models import TelemetryCursor
from tests import factories
from tests.gateway.conftest import ConnectAgent, in_db

pytestmark = pytest.mark.django_db

T = TypeVar("T")


def nodes(count: int) -> list[tuple[Node, str]]:
    """``count`` online nodes of one cluster, each with a credential."""
    cluster, node_type = factories.cluster(), factories.node_type(nics=0, gpus=1)
    made = [factories.node(cluster, node_type) for _ in range(count)]
    Node.objects.filter(pk__in=[node.pk for node in made]).update(liveness=Liveness.ONLINE)
    return [(node, NodeCredential.issue(node)[1]) for node in made]


def hello(node: Node, version: str = "1.2.3") -> protocol.Hello:
    return protocol.Hello(protocol=protocol.PROTOCOL_VERSION, agent_version=version, hostname=node.hostname)


def queries(function: Callable[[list[T]], object], items: list[T]) -> int:
    with CaptureQueriesContext(connection) as captured:
        function(items)
    return len(captured.captured_queries)


def test_it_authenticates_a_batch_with_one_answer_per_secret() -> None:
    (a, secret_a), (b, secret_b), (c, secret_c) = nodes(3)
    NodeCredential.objects.filter(node=c).update(revoked_at=timezone.now())
    key_of_a = secret_a.rsplit("_", 1)[0]
    presented = [
        (secret_a, "10.0.0.1"),
        (secret_c, "10.0.0.3"),  # revoked
        (f"{key_of_a}_not-the-secret", "10.0.0.9"),  # a's key id, a guessed secret
        ("cpn_garbage", "10.0.0.9"),
        (secret_b, None),
    ]
    found = admission.authenticate_all(presented)
    assert [credential.node if credential else None for credential in found] == [a, None, None, None, b]
    seen = {row.node_id: (row.last_seen_at is not None, row.last_ip) for row in NodeCredential.objects.all()}
    assert seen == {a.pk: (True, "10.0.0.1"), b.pk: (True, None), c.pk: (False, None)}


def test_authenticating_more_agents_at_once_costs_no_more_queries() -> None:
    fleet = nodes(12)
    few, many = fleet[:2], fleet[2:]
    assert queries(admission.authenticate_all, [(secret, "10.0.0.1") for _, secret in few]) == queries(
        admission.authenticate_all, [(secret, "10.0.0.1") for _, secret in many]
    )


def test_it_welcomes_a_batch_each_from_its_own_stored_seqs() -> None:
    (a, _), (b, _) = nodes(2)
    TelemetryCursor.objects.create(node=a, telemetry_seq=41, events_seq=7, updated_at=timezone.now())
    NodeAgent.objects.create(node=b, agent_version="0.9", inventory={"gpus": []}, host={"os": "x"})
    at = timezone.now()
    arrivals = [admission.Arrival(a, hello(a), "10.0.0.1", at), admission.Arrival(b, hello(b, "2.0"), None, at)]
    welcomed = admission.welcome_all(arrivals)
    assert [(w.telemetry_seq, w.events_seq, w.commands) for w in welcomed] == [(41, 7, []), (0, 0, [])]
    agents = {agent.node_id: agent for agent in NodeAgent.objects.all()}
    assert (agents[a.pk].agent_version, agents[a.pk].remote_addr, agents[a.pk].connected_at) == (
        "1.2.3",
        "10.0.0.1",
        at,
    )
    # What the Hello does not say stays as the last inventory left it.
    assert (agents[b.pk].agent_version, agents[b.pk].inventory, agents[b.pk].host) == ("2.0", {"gpus": []}, {"os": "x"})
    assert set(Node.objects.values_list("last_seen_at", flat=True)) == {at}


def test_welcoming_more_agents_at_once_costs_no_more_queries() -> None:
    fleet = [node for node, _ in nodes(12)]
    at = timezone.now()
    few, many = ([admission.Arrival(node, hello(node), None, at) for node in part] for part in (fleet[:2], fleet[2:]))
    assert queries(admission.welcome_all, few) == queries(admission.welcome_all, many)


def test_a_node_said_hello_twice_in_one_batch_keeps_its_later_connection() -> None:
    ((node, _),) = nodes(1)
    earlier = timezone.now()
    later = earlier + timedelta(seconds=3)
    arrivals = [
        admission.Arrival(node, hello(node, "new"), None, later),
        admission.Arrival(node, hello(node), None, earlier),
    ]
    assert len(admission.welcome_all(arrivals)) == 2
    assert NodeAgent.objects.values_list("agent_version", "connected_at").get() == ("new", later)


def test_a_batch_of_hellos_writes_its_agent_records_in_node_order() -> None:
    """The upsert locks rows in the order it lists them, every other writer of them in node order:
    listed as the agents arrived, a fleet's reconnect deadlocked with the bookkeeper's writes."""
    fleet = [node for node, _ in nodes(4)]
    at = timezone.now()
    with mock.patch.object(NodeAgent.objects, "bulk_create", wraps=NodeAgent.objects.bulk_create) as upsert:
        admission.welcome_all([admission.Arrival(node, hello(node), None, at) for node in reversed(fleet)])
    assert [agent.node_id for agent in upsert.call_args.args[0]] == [node.pk for node in fleet]


def test_a_disconnect_ends_its_own_connection_only() -> None:
    (gone, _), (reconnected, _) = nodes(2)
    connected_at = timezone.now() - timedelta(minutes=1)
    NodeAgent.objects.create(node=gone, connected_at=connected_at)
    NodeAgent.objects.create(node=reconnected, connected_at=timezone.now())  # a newer connection is up
    admission.record_disconnects([(gone.pk, connected_at), (reconnected.pk, connected_at)])
    ended = dict(NodeAgent.objects.values_list("node_id", "disconnected_at"))
    assert ended[gone.pk] is not None
    assert ended[reconnected.pk] is None


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_fleet_connecting_at_once_is_welcomed_whole(connect_agent: ConnectAgent) -> None:
    fleet = await in_db(nodes)(24)
    first = fleet[0][0]
    await in_db(TelemetryCursor.objects.create)(node=first, telemetry_seq=9, events_seq=3, updated_at=timezone.now())
    agents = await asyncio.gather(*(connect_agent(secret, node.hostname) for node, secret in fleet))
    welcomes = await asyncio.gather(*(agent.hello() for agent in agents))
    assert all(isinstance(welcome, protocol.Welcome) for welcome in welcomes)
    assert [(w.node_id, w.last_telemetry_seq, w.last_events_seq) for w in welcomes] == [
        (node.pk, 9 if node == first else 0, 3 if node == first else 0) for node, _ in fleet
    ]
    agents[0].seq = 9  # it goes on from what is stored
    acks = await asyncio.gather(*(agent.roundtrip() for agent in agents))
    assert [ack.seq for ack in acks] == [10] + [1] * (len(fleet) - 1)
