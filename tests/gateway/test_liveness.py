"""Liveness: a node whose agent falls silent is marked unreachable within AGENT_UNREACHABLE_AFTER_S,
each change is announced once (audited, its liveness failure raised or resolved), and the node
recovers by itself when the agent speaks again."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from apps.accounts.models import AuditLogEntry
from apps.failures.choices import FailureKind
from apps.failures.models import Failure
from apps.gateway import liveness
from apps.gateway.tasks import sweep_liveness
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from controlplane.celery import app as celery_app
from tests import factories
from tests.gateway.conftest import enrolled_node, eventually, in_db

T0 = timezone.now().replace(microsecond=0)


@pytest.fixture
def fleet(db) -> dict[str, Node]:
    cluster, node_type = factories.cluster(), factories.node_type(nics=0, gpus=1)
    nodes = {name: factories.node(cluster, node_type, name) for name in ("quiet", "chatty", "never-seen")}
    Node.objects.filter(hostname__in=["quiet", "chatty"]).update(liveness=Liveness.ONLINE, last_seen_at=T0)
    return nodes


def liveness_of(hostname: str) -> str:
    return Node.objects.get(hostname=hostname).liveness


def announced(action: str) -> list[str]:
    """The hostnames of the nodes whose liveness changes were announced as ``action``, in order."""
    return list(AuditLogEntry.objects.filter(action=action).order_by("id").values_list("object_repr", flat=True))


def open_liveness_failures() -> list[str]:
    failures = Failure.objects.active().filter(kind=FailureKind.LIVENESS).order_by("node__hostname")
    return list(failures.values_list("node__hostname", flat=True))


@pytest.mark.parametrize("sweep_phase_s", [0.0, 1.3, 2.5, 4.9])
def test_it_keeps_its_promise_of_unreachable_within_15_seconds_of_the_last_message(fleet, sweep_phase_s):
    last_message = T0
    # Worst case: the message just missed a batch write, so last_seen_at says one resolution later.
    Node.objects.filter(hostname="quiet").update(
        last_seen_at=last_message + timedelta(seconds=liveness.LAST_SEEN_RESOLUTION_S)
    )
    sweeps = (last_message + timedelta(seconds=sweep_phase_s + k * settings.AGENT_LIVENESS_SWEEP_S) for k in range(10))

    marked_at = next(now for now in sweeps if liveness.mark_unreachable(now))

    assert marked_at - last_message <= timedelta(seconds=settings.AGENT_UNREACHABLE_AFTER_S) == timedelta(seconds=15)
    assert settings.CELERY_BEAT_SCHEDULE["gateway-sweep-liveness"]["schedule"] == settings.AGENT_LIVENESS_SWEEP_S


def test_it_marks_a_silent_node_unreachable_once_and_announces_it_once(fleet):
    liveness.record_heard([fleet["chatty"].pk], T0 + timedelta(seconds=8))

    before_limit = liveness.mark_unreachable(T0 + liveness.silence_limit())
    marked = liveness.mark_unreachable(T0 + liveness.silence_limit() + timedelta(seconds=1))
    again = liveness.mark_unreachable(T0 + timedelta(seconds=60))

    assert before_limit == []
    assert [node.hostname for node in marked] == ["quiet"]
    assert [node.hostname for node in again] == ["chatty"]
    assert announced("node.unreachable") == ["quiet", "chatty"]
    assert open_liveness_failures() == ["chatty", "quiet"]
    assert liveness_of("never-seen") == Liveness.UNKNOWN


def test_a_liveness_failure_resolved_while_the_node_is_still_silent_is_raised_again_at_the_next_sweep(fleet):
    liveness.mark_unreachable(T0 + timedelta(seconds=30))
    first = Failure.objects.get(node=fleet["quiet"])
    first.resolve(actor="alice", note="looked fine from here")
    liveness.sight_unreachable(T0 + timedelta(seconds=35))  # chatty's is still open: nothing new for it

    second = Failure.objects.active().get(node=fleet["quiet"])
    assert second.pk != first.pk
    assert (second.code, second.first_seen) == ("node-unreachable", T0 + timedelta(seconds=35))
    assert open_liveness_failures() == ["chatty", "quiet"]
    assert Failure.objects.filter(node=fleet["chatty"]).count() == 1
    liveness.sight_unreachable(T0 + timedelta(seconds=40))
    assert Failure.objects.filter(node=fleet["quiet"]).count() == 2


def test_it_brings_an_unreachable_node_back_when_its_agent_speaks(fleet):
    liveness.mark_unreachable(T0 + timedelta(seconds=30))

    returned = liveness.record_heard([fleet["quiet"].pk, fleet["never-seen"].pk], T0 + timedelta(seconds=40))

    assert sorted(node.hostname for node in returned) == ["never-seen", "quiet"]
    assert announced("node.recovered") == ["quiet"]  # a node seen for the first time did not recover from anything
    assert open_liveness_failures() == ["chatty"]  # chatty was never heard again
    assert Node.objects.get(hostname="quiet").last_seen_at == T0 + timedelta(seconds=40)
    assert liveness_of("never-seen") == Liveness.ONLINE
    assert liveness.record_heard([fleet["quiet"].pk], T0 + timedelta(seconds=41)) == []


def test_hearing_from_nodes_that_are_online_is_one_statement(fleet, django_assert_num_queries):
    """The gateway's bookkeeping every second, for every node it heard from (nearly always all online)."""
    heard = [fleet["quiet"].pk, fleet["chatty"].pk, fleet["quiet"].pk]  # one node twice: two connections

    with django_assert_num_queries(1):
        assert liveness.record_heard(heard, T0 + timedelta(seconds=3)) == []
    assert set(Node.objects.filter(pk__in=heard).values_list("last_seen_at", flat=True)) == {T0 + timedelta(seconds=3)}


def test_it_writes_the_changes_to_the_audit_log(fleet):
    liveness.mark_unreachable(T0 + timedelta(seconds=30))
    liveness.record_heard([fleet["quiet"].pk], T0 + timedelta(seconds=40))

    entries = AuditLogEntry.objects.filter(object_type="inventory.node", object_id=str(fleet["quiet"].pk)).order_by(
        "id"
    )
    assert [(e.action, e.actor) for e in entries] == [
        ("node.unreachable", "system:liveness"),
        ("node.recovered", "system:liveness"),
    ]


def test_the_beat_task_sweeps_on_the_gateway_queue(fleet):
    Node.objects.filter(hostname="quiet").update(last_seen_at=timezone.now() - timedelta(minutes=1))
    Node.objects.filter(hostname="chatty").update(last_seen_at=timezone.now())

    result = sweep_liveness.apply()

    assert result.get() == ["quiet"]
    assert celery_app.amqp.router.route({}, sweep_liveness.name)["queue"].name == "gateway"
    assert (sweep_liveness.soft_time_limit, sweep_liveness.time_limit) == (4, 10)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_waits_for_the_timeout_after_a_disconnect_and_recovers_on_reconnect(connect_agent):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await agent.socket.close()  # a reconnect storm must not flap every node: the timeout decides
    assert await eventually(lambda: not Node.objects.get(pk=node.pk).agent.connected)
    assert await in_db(liveness_of)(node.hostname) == Liveness.ONLINE

    silent_since = await in_db(lambda: Node.objects.get(pk=node.pk).last_seen_at)()
    marked = await in_db(liveness.mark_unreachable)(silent_since + liveness.silence_limit() + timedelta(seconds=1))
    assert [n.hostname for n in marked] == [node.hostname]

    again = await connect_agent(credential, node.hostname)
    await again.hello()
    assert await in_db(liveness_of)(node.hostname) == Liveness.ONLINE
    node_log = AuditLogEntry.objects.filter(object_type="inventory.node").order_by("id")
    actions = await in_db(lambda: list(node_log.values_list("action", flat=True)))()
    assert actions == ["node.unreachable", "node.recovered"]
