"""Getting commands to nodes: written before anything is queued, sent in order one step at a time,
one invasive command per node, waiting for an offline node, sent again until answered, expired at the
deadline with the reason, and runs judged once every command is over."""

from datetime import timedelta
from unittest import mock

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from kombu.exceptions import OperationalError

from agents import protocol
from apps.accounts.models import AuditLogEntry
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from apps.jobs import dispatch, tasks
from apps.jobs.choices import CommandState, RunState
from apps.jobs.models import Command, Run, Step
from tests.jobs.conftest import launch
from tests.jobs.reporting import failed_compute, finished, started

pytestmark = pytest.mark.django_db(transaction=True)

BURN_IN = (Step("health"), Step("compute", {"duration_s": 5}), Step("storage"))


def states(run: Run) -> list[tuple[str, int, str, int]]:
    return [(c.node.hostname, c.sequence, c.state, c.attempts) for c in run.commands.order_by("node_id", "sequence")]


def command(run: Run, node: Node, sequence: int = 0) -> Command:
    return Command.objects.get(run=run, node=node, sequence=sequence)


def test_it_writes_the_run_and_its_commands_before_queueing_its_start(make_nodes, dispatched):
    nodes = make_nodes(2)
    with transaction.atomic():
        run = launch(nodes, BURN_IN, title="burn-in")
        # Written, and nothing queued or sent until the transaction commits.
        assert run.state == RunState.PENDING
        assert {(n, s, state, a) for n, s, state, a in states(run)} == {
            (node.hostname, sequence, CommandState.PENDING, 0) for node in nodes for sequence in range(3)
        }
        assert dispatched.take() == []

    run.refresh_from_db()
    assert run.state == RunState.RUNNING
    first_steps = {(node_id, message.check) for node_id, message in dispatched.take()}
    assert first_steps == {(node.pk, "health") for node in nodes}
    keys = list(run.commands.values_list("key", flat=True))
    assert len(set(keys)) == 6  # one idempotency key per node and step


def test_a_node_takes_a_runs_steps_in_order_one_at_a_time(make_nodes, dispatched):
    (node,) = make_nodes(1)
    run = launch([node], BURN_IN)
    sent = dispatched.take()
    assert [(message.check, message.key) for _, message in sent] == [("health", command(run, node, 0).key)]

    started(command(run, node, 0))
    assert dispatched.take() == []  # the next step waits for this one to end
    finished(command(run, node, 0))
    assert [message.check for _, message in dispatched.take()] == ["compute"]
    finished(command(run, node, 1))
    assert [message.check for _, message in dispatched.take()] == ["storage"]
    assert [state for _, _, state, _ in states(run)] == [CommandState.SUCCEEDED] * 2 + [CommandState.SENT]


def test_the_command_carries_its_check_parameters_time_limit_environment_and_deadline(make_nodes, dispatched):
    (node,) = make_nodes(1)
    deadline = timezone.now() + timedelta(minutes=30)
    step = Step("nccl_allreduce", {"sizes_bytes": [4096]}, time_limit_s=120, env={"NCCL_ALGO": "Ring"})
    run = launch([node], [step], deadline=deadline)

    [(node_id, message)] = dispatched.take()

    assert node_id == node.pk
    assert message == protocol.Command(
        key=command(run, node).key,
        check="nccl_allreduce",
        params={"sizes_bytes": [4096]},
        env={"NCCL_ALGO": "Ring"},
        time_limit_s=120,
        deadline=deadline.timestamp(),
        invasive=True,
    )


def test_a_node_runs_one_invasive_command_at_a_time_whichever_run_it_belongs_to(make_nodes, dispatched):
    (node,) = make_nodes(1)
    first = launch([node], [Step("compute")])
    second = launch([node], [Step("health"), Step("storage")])

    # The health read goes alongside the first run's compute; the storage check waits for it.
    assert sorted(message.check for _, message in dispatched.take()) == ["compute", "health"]
    finished(command(second, node, 0))
    assert dispatched.take() == []
    finished(command(first, node, 0))
    assert [message.check for _, message in dispatched.take()] == ["storage"]


def test_the_database_refuses_a_second_invasive_command_in_an_agents_hands(make_nodes):
    (node,) = make_nodes(1)
    launch([node], [Step("compute")])
    other = launch([node], [Step("storage")])
    waiting = command(other, node)
    assert waiting.state == CommandState.PENDING

    with pytest.raises(IntegrityError), transaction.atomic():
        Command.objects.filter(pk=waiting.pk).update(state=CommandState.SENT)


def test_a_runs_start_claims_its_commands_in_the_same_queries_for_two_nodes_as_for_twenty(
    make_nodes, dispatched, django_assert_num_queries
):
    def written_on(nodes: list[Node]) -> Run:
        with mock.patch("apps.jobs.queue.start_run"):  # written, not started: started below
            run = launch(nodes, [Step("health")])
        Run.objects.filter(pk=run.pk).update(state=RunState.RUNNING)
        return run

    two, twenty = written_on(make_nodes(2)), written_on(make_nodes(20))
    with CaptureQueriesContext(connection) as for_two:
        dispatch.advance_nodes(two.commands.values_list("node_id", flat=True), timezone.now())
    with django_assert_num_queries(len(for_two)):
        dispatch.advance_nodes(twenty.commands.values_list("node_id", flat=True), timezone.now())

    assert len(dispatched.take()) == 22
    assert {(c.state, c.attempts) for c in Command.objects.all()} == {(CommandState.SENT, 1)}


def test_a_batch_of_sends_the_database_refuses_for_one_node_still_sends_the_others(make_nodes, dispatched):
    """Another worker gave one of the nodes an invasive command between this one's read and its claim."""
    busy, free = make_nodes(2)
    launch([busy], [Step("compute")])  # the other worker's, in the busy node's agent's hands
    with mock.patch("apps.jobs.queue.start_run"):
        run = launch([busy, free], [Step("storage")])
    Run.objects.filter(pk=run.pk).update(state=RunState.RUNNING)
    dispatched.take()

    sent = dispatch._claim_sends([command(run, busy).pk, command(run, free).pk], timezone.now())

    assert [c.node_id for c in sent] == [free.pk]
    assert (command(run, busy).state, command(run, free).state) == (CommandState.PENDING, CommandState.SENT)


def test_an_offline_nodes_commands_wait_and_go_out_when_its_agent_returns(make_nodes, dispatched):
    (node,) = make_nodes(1, liveness=Liveness.UNREACHABLE)
    run = launch([node], BURN_IN)
    assert dispatched.take() == []
    assert command(run, node).state == CommandState.PENDING

    Node.objects.filter(pk=node.pk).update(liveness=Liveness.ONLINE)
    assert dispatch.frames_on_connect(node.pk, timezone.now()) == []  # nothing it should have had yet

    assert [message.check for _, message in dispatched.take()] == ["health"]  # advanced by a task
    assert command(run, node).state == CommandState.SENT


def test_a_reconnecting_agent_is_sent_what_it_has_again_and_cancels_it_has_not_answered(make_nodes, dispatched):
    a, b = make_nodes(2)
    run = launch([a, b], [Step("compute")])
    started(command(run, b))
    cancelled = launch([a], [Step("health")])
    cancelled.cancel(actor="tester")
    dispatched.take()

    frames_a = [protocol.decode_server_message(f) for f in dispatch.frames_on_connect(a.pk, timezone.now())]
    frames_b = [protocol.decode_server_message(f) for f in dispatch.frames_on_connect(b.pk, timezone.now())]

    assert [(type(m).__name__, m.key) for m in frames_a] == [
        ("Command", command(run, a).key),
        ("Cancel", command(cancelled, a).key),
    ]
    assert [(type(m).__name__, m.key) for m in frames_b] == [("Command", command(run, b).key)]
    assert (command(run, a).attempts, command(run, b).attempts) == (2, 1)  # a running one is not a new attempt


def test_an_unanswered_command_is_sent_again_while_its_node_is_online(make_nodes, dispatched, settings):
    settings.JOBS_ACK_TIMEOUT_S = 10
    online, offline = make_nodes(2)
    run = launch([online, offline], [Step("health")])
    dispatched.take()
    Node.objects.filter(pk=offline.pk).update(liveness=Liveness.UNREACHABLE)
    sent_at = command(run, online).sent_at

    assert dispatch.resend(sent_at + timedelta(seconds=5)) == []
    resent = dispatch.resend(sent_at + timedelta(seconds=11))

    assert [c.node_id for c in resent] == [online.pk]
    assert dispatched.keys() == [command(run, online).key]
    assert (command(run, online).attempts, command(run, offline).attempts) == (2, 1)


def test_a_running_command_past_its_time_limit_is_asked_about_again(make_nodes, dispatched):
    (node,) = make_nodes(1)
    run = launch([node], [Step("compute", time_limit_s=60)])
    started(command(run, node))
    dispatched.take()
    began = command(run, node).started_at

    assert dispatch.resend(began + timedelta(seconds=60)) == []  # within its limit: no news is normal
    assert [c.pk for c in dispatch.resend(began + timedelta(seconds=60) + dispatch.OVERDUE_GRACE * 2)] == [
        command(run, node).pk
    ]
    assert dispatched.keys() == [command(run, node).key]
    assert command(run, node).attempts == 1


def test_what_is_open_at_the_deadline_expires_saying_where_it_was(make_nodes, dispatched):
    waiting, unanswered, running = make_nodes(3)
    deadline = timezone.now() + timedelta(minutes=5)
    run = launch([waiting, unanswered, running], [Step("compute"), Step("health")], deadline=deadline)
    started(command(run, running))
    dispatched.take()
    Node.objects.filter(pk=waiting.pk).update(liveness=Liveness.UNREACHABLE)
    Command.objects.filter(run=run, node=waiting, sequence=0).update(state=CommandState.PENDING)

    assert dispatch.expire(deadline - timedelta(seconds=1)) == []
    expired = dispatch.expire(deadline)

    assert len(expired) == 6
    reasons = {(c.node_id, c.sequence): c.reason for c in run.commands.all()}
    assert "was unreachable, last seen" in reasons[(waiting.pk, 0)]
    assert "sent 1 time(s) and never acknowledged" in reasons[(unanswered.pk, 0)]
    assert "while running" in reasons[(running.pk, 0)]
    assert "before its turn" in reasons[(running.pk, 1)]
    assert set(run.commands.values_list("state", flat=True)) == {CommandState.EXPIRED}
    # What an agent may have (sent, perhaps started with the ack lost; running) is stopped there too.
    cancels = {(node_id, m.key) for node_id, m in dispatched.take() if isinstance(m, protocol.Cancel)}
    assert cancels == {(node.pk, command(run, node).key) for node in (unanswered, running)}
    assert [c.node_id for c in Command.objects.stopping()] == [unanswered.pk, running.pk]
    entry = AuditLogEntry.objects.get(action="run.commands_expired")
    assert (entry.actor, entry.object_id, entry.detail["count"]) == ("system:jobs", str(run.pk), 6)


def test_a_run_is_judged_once_every_command_is_over(make_nodes):
    good, bad = make_nodes(2)
    run = launch([good, bad], [Step("compute")])
    finished(command(run, good))
    run.refresh_from_db()
    assert run.state == RunState.RUNNING

    finished(command(run, bad), exit_code=1, result=failed_compute(gpu=3))

    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert run.reason == (
        f"1 failed of 2 commands: {bad.hostname} compute: the check failed: tflops_bf16 on GPU 3 (612 < 700 TFLOP/s)"
    )
    entry = AuditLogEntry.objects.get(action="run.finish")
    assert (entry.actor, entry.detail["state"]) == ("system:jobs", "failed")
    assert dispatch.judge_runs([run.pk], timezone.now()) == []  # judged once


def test_a_run_whose_commands_all_succeed_succeeds(make_nodes):
    nodes = make_nodes(3)
    run = launch(nodes, [Step("health")])
    for node in nodes:
        finished(command(run, node))
    run.refresh_from_db()
    assert (run.state, run.reason) == (RunState.SUCCEEDED, "all 3 commands succeeded")


def test_the_sweep_starts_a_run_whose_start_could_not_be_queued(make_nodes, dispatched, monkeypatch, caplog):
    (node,) = make_nodes(1)

    def broker_down(*args: object, **kwargs: object) -> None:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.start_run, "apply_async", broker_down)
    run = launch([node], [Step("health")])
    run.refresh_from_db()
    assert run.state == RunState.PENDING  # the launch itself did not fail
    assert "the jobs sweep does its work" in caplog.text

    summary = dispatch.sweep(timezone.now())

    run.refresh_from_db()
    assert run.state == RunState.RUNNING
    assert summary["started"] == 1
    assert dispatched.keys() == [command(run, node).key]


def test_a_start_delivered_twice_starts_the_run_once(make_nodes, dispatched):
    (node,) = make_nodes(1)
    run = launch([node], [Step("health")])
    dispatched.take()

    assert dispatch.start_run(run.pk, timezone.now()) is False
    assert dispatched.take() == []
    assert command(run, node).attempts == 1
