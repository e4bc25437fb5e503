"""Cancelling a run or one command (the domain methods the API, the CLI and the UI call): what waits
ends at once, what an agent has is stopped there, and what is over cannot be cancelled."""

import pytest

from agents import protocol
from apps.jobs.choices import CommandState, RunState
from apps.jobs.models import Command, IllegalRunChange, Step
from tests.jobs.conftest import launch
from tests.jobs.reporting import finished, started

pytestmark = pytest.mark.django_db(transaction=True)


def test_cancelling_a_run_ends_what_waits_and_stops_what_agents_have(make_nodes, dispatched):
    running, waiting = make_nodes(2)
    run = launch([running, waiting], [Step("compute"), Step("health")])
    started(run.commands.get(node=running, sequence=0))
    dispatched.take()

    cancelled = run.cancel(actor="olga", reason="wrong suite")

    assert (run.state, run.cancelled_by, run.reason) == (RunState.CANCELLED, "olga", "cancelled by olga: wrong suite")
    assert len(cancelled) == 4
    assert set(run.commands.values_list("state", flat=True)) == {CommandState.CANCELLED}
    cancels = {(node_id, m.key) for node_id, m in dispatched.take() if isinstance(m, protocol.Cancel)}
    assert cancels == {(node.pk, run.commands.get(node=node, sequence=0).key) for node in (running, waiting)}
    assert list(Command.objects.stopping().values_list("node_id", flat=True)) == [running.pk, waiting.pk]


def test_a_run_that_is_over_cannot_be_cancelled(make_nodes):
    (node,) = make_nodes(1)
    run = launch([node], [Step("health")])
    finished(run.commands.get())
    run.refresh_from_db()

    with pytest.raises(IllegalRunChange, match="succeeded; there is nothing to cancel"):
        run.cancel(actor="olga")
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED


def test_cancelling_one_command_lets_the_run_go_on_and_the_node_take_its_next_step(make_nodes, dispatched):
    a, b = make_nodes(2)
    run = launch([a, b], [Step("compute"), Step("health")])
    dispatched.take()

    run.commands.get(node=a, sequence=0).cancel(actor="olga", reason="GPU 3 is being replaced")

    frames = [(node_id, type(m).__name__, getattr(m, "check", None)) for node_id, m in dispatched.take()]
    assert frames == [(a.pk, "Cancel", None), (a.pk, "Command", "health")]
    run.refresh_from_db()
    assert run.state == RunState.RUNNING
    for command in run.commands.filter(state__in=[CommandState.SENT]):
        finished(command)
    finished(run.commands.get(node=b, sequence=1))
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert run.reason.startswith("1 cancelled of 4 commands: ")
    assert "cancelled by olga: GPU 3 is being replaced" in run.reason


def test_a_command_that_is_over_cannot_be_cancelled(make_nodes):
    (node,) = make_nodes(1)
    run = launch([node], [Step("health"), Step("storage")])
    command = run.commands.get(sequence=0)
    finished(command)

    with pytest.raises(IllegalRunChange, match="succeeded; there is nothing to cancel"):
        command.cancel(actor="olga")
    assert Command.objects.get(pk=command.pk).state == CommandState.SUCCEEDED
