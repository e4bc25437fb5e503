"""What agents report about their commands: each report applied once however often it is repeated,
the outcome judged in words, and a key that is not the reporting node's refused."""

from typing import NamedTuple

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents import protocol
from apps.core import events
from apps.jobs import queue, reports
from apps.jobs.choices import CommandState
from apps.jobs.models import Command, CommandLogLine, Step
from tests.jobs.conftest import launch
from tests.jobs.reporting import T, failed_compute, finished, started

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent(make_nodes) -> Command:
    (node,) = make_nodes(1)
    run = launch([node], [Step("compute", time_limit_s=300)])
    return run.commands.get()


class Heard(NamedTuple):
    command_id: int
    change: events.CommandChange


@pytest.fixture
def heard():
    """Each command of each ``CommandsChanged`` announced, with its change."""
    received: list[Heard] = []

    def hear(event: events.CommandsChanged) -> None:
        received.extend(Heard(command.command_id, event.change) for command in event.commands)

    events.subscribe(events.CommandsChanged, hear)
    yield received
    events.unsubscribe(events.CommandsChanged, hear)


def reload(command: Command) -> Command:
    return Command.objects.get(pk=command.pk)


def test_a_started_command_is_running_once_however_often_the_agent_says_so(sent, heard):
    started(sent, at=T)
    started(sent, repeat=True)

    assert reload(sent).state == CommandState.RUNNING
    assert reload(sent).started_at.timestamp() == pytest.approx(T)
    assert [event.change for event in heard] == ["started"]


def test_progress_and_log_lines_are_kept_and_announced(sent, heard):
    started(sent)
    heard.clear()
    progress = protocol.CheckProgress(check="compute", fraction=0.25, step="bf16 on 8 GPUs", message="window 3")
    log = protocol.CheckLog(check="compute", level="warning", message="GPU 3 throttled (thermal)")

    reports.store_report(sent.node_id, protocol.CommandUpdate(key=sent.key, line=progress))
    reports.store_report(sent.node_id, protocol.CommandUpdate(key=sent.key, line=log))

    command = reload(sent)
    assert (command.fraction, command.step, command.progress_message) == (0.25, "bf16 on 8 GPUs", "window 3")
    assert list(command.log_lines.values_list("level", "message")) == [("warning", "GPU 3 throttled (thermal)")]
    assert [(event.command_id, event.change) for event in heard] == [(sent.pk, "progress"), (sent.pk, "log")]


def test_log_lines_past_the_limit_are_counted_not_kept(sent, monkeypatch):
    monkeypatch.setattr(CommandLogLine, "MAX_LOG_LINES", 2)
    for number in range(5):
        line = protocol.CheckLog(check="compute", level="info", message=f"line {number}")
        reports.store_report(sent.node_id, protocol.CommandUpdate(key=sent.key, line=line))

    assert list(sent.log_lines.values_list("message", flat=True)) == ["line 0", "line 1"]
    assert reload(sent).log_lines_dropped == 3


@pytest.mark.parametrize(
    ("fields", "state", "reason"),
    [
        ({"exit_code": 0}, CommandState.SUCCEEDED, "exited 0"),
        ({"exit_code": 1, "result": failed_compute()}, CommandState.FAILED, "the check failed: tflops_bf16 on GPU 3"),
        ({"exit_code": 3, "output": "Traceback\nRuntimeError: CUDA error\n"}, CommandState.FAILED, "exit code 3: Runt"),
        ({"outcome": "timed_out"}, CommandState.FAILED, "ran past its time limit of 300 s"),
        ({"outcome": "lost", "detail": "agent restarted"}, CommandState.FAILED, "lost: agent restarted; not run"),
        ({"outcome": "refused", "detail": "past its deadline"}, CommandState.FAILED, "refused by the agent: past its"),
        ({"outcome": "cancelled", "detail": "SIGTERM"}, CommandState.CANCELLED, "stopped by the agent: SIGTERM"),
    ],
)
def test_a_result_ends_the_command_as_its_outcome_says(sent, fields, state, reason):
    started(sent)
    finished(sent, **fields)

    command = reload(sent)
    assert command.state == state
    assert command.reason.startswith(reason)
    assert command.outcome == fields.get("outcome", "exited")


def test_the_result_the_check_wrote_is_kept_as_it_came(sent):
    finished(sent, exit_code=1, result=failed_compute(), output="the end of stderr")

    command = reload(sent)
    assert command.result["measurements"][0] == {
        "name": "tflops_bf16",
        "measured": 612.0,
        "unit": "TFLOP/s",
        "expected": 700.0,
        "passed": False,
        "gpu": 3,
    }  # as on the wire: defaults (the bound, empty evidence) left out
    assert (command.result["type"], command.result["device"]) == ("check_result", "cpu")
    assert (command.exit_code, command.output) == (1, "the end of stderr")


def test_a_repeated_result_changes_nothing(sent, heard):
    finished(sent)
    first = reload(sent)
    heard.clear()

    finished(sent, exit_code=1, repeat=True)

    again = reload(sent)
    assert (again.state, again.exit_code, again.finished_at) == (first.state, 0, first.finished_at)
    assert heard == []


def test_a_cancelled_commands_result_is_kept_and_it_stays_cancelled(sent):
    started(sent)
    sent.cancel(actor="tester")
    assert reload(sent).stop_requested_at is not None

    finished(sent, outcome="cancelled", detail="stopped by SIGTERM; group killed")

    command = reload(sent)
    assert (command.state, command.outcome, command.stop_requested_at) == (CommandState.CANCELLED, "cancelled", None)
    assert command.reason == "cancelled by tester"


def test_a_report_about_another_nodes_command_is_refused(sent, make_nodes):
    (other,) = make_nodes(1)

    with pytest.raises(reports.UnknownCommand, match="was sent to this node"):
        reports.store_report(other.pk, protocol.CommandStarted(key=sent.key, started=T))
    with pytest.raises(reports.UnknownCommand):
        reports.store_report(sent.node_id, protocol.CommandStarted(key="not-a-key", started=T))
    assert reload(sent).state == CommandState.SENT


def test_a_runs_starts_from_many_agents_are_stored_in_one_batch(make_nodes, heard):
    nodes = make_nodes(6)
    run = launch(nodes, [Step("health")])
    commands = list(run.commands.order_by("node_id"))
    batch = [(c.node_id, protocol.CommandStarted(key=c.key, started=T + i)) for i, c in enumerate(commands)]
    batch += [(nodes[0].pk, protocol.CommandStarted(key=commands[1].key, started=T))]  # another node's key
    batch += [(commands[0].node_id, protocol.CommandStarted(key=commands[0].key, started=T + 9, repeat=True))]

    refusals = reports.store_reports(batch)

    assert refusals[:6] == [None] * 6
    assert refusals[7] is None  # a repeat: the first start is kept
    assert f"No command {commands[1].key!r} was sent to this node" in str(refusals[6])
    started_at = dict(run.commands.values_list("pk", "started_at"))
    assert [started_at[c.pk].timestamp() for c in commands] == pytest.approx([T + i for i in range(6)])
    assert set(run.commands.values_list("state", flat=True)) == {CommandState.RUNNING}
    assert sorted(heard) == sorted(Heard(c.pk, "started") for c in commands)


def everything_an_agent_says(command: Command) -> list[tuple[int, reports.Report]]:
    """A simulated health check's reports: started, progress, a log line, the result."""
    progress = protocol.CheckProgress(check="health", fraction=0.5, step="GPU counters")
    log = protocol.CheckLog(check="health", level="info", message=f"passed on {command.node_id}")
    messages: list[reports.Report] = [
        protocol.CommandStarted(key=command.key, started=T),
        protocol.CommandUpdate(key=command.key, line=progress),
        protocol.CommandUpdate(key=command.key, line=log),
        protocol.CommandResult(key=command.key, outcome="exited", exit_code=0, started=T, finished=T + 1),
    ]
    return [(command.node_id, message) for message in messages]


def test_many_agents_whole_answers_are_stored_in_the_queries_of_one_agents(make_nodes, heard, monkeypatch):
    """A thousand agents answer a run within a second or two: their reports, and what follows each
    command's end, must not cost a query or a task each (benchmarks/dispatch.py)."""
    nodes = make_nodes(7)
    one, many = launch(nodes[:1], [Step("health")]), launch(nodes[1:], [Step("health")])
    queued = []
    monkeypatch.setattr(queue, "_send", lambda name, args: queued.append((name, args)))

    with CaptureQueriesContext(connection) as of_one:
        reports.store_reports([report for c in one.commands.all() for report in everything_an_agent_says(c)])
    with CaptureQueriesContext(connection) as of_many:
        refusals = reports.store_reports(
            [report for c in many.commands.all() for report in everything_an_agent_says(c)]
        )

    assert refusals == [None] * 24
    assert len(of_many) == len(of_one)
    commands = list(many.commands.all())
    assert {(c.state, c.step, c.fraction) for c in commands} == {(CommandState.SUCCEEDED, "GPU counters", 1.0)}
    assert [c.started_at.timestamp() for c in commands] == pytest.approx([T] * 6)
    lines = CommandLogLine.objects.filter(command__run=many).values_list("command__node_id", "message")
    assert sorted(lines) == sorted((c.node_id, f"passed on {c.node_id}") for c in commands)
    assert sorted(heard[-24:]) == sorted(Heard(c.pk, change) for c in commands for change in CHANGES)
    assert queued[-1] == ("commands_finished", (sorted(c.pk for c in commands),))  # one task for them all


CHANGES = ("started", "progress", "log", "state")


def test_of_a_commands_progress_lines_in_one_batch_only_the_last_is_written(
    make_nodes, heard, django_assert_num_queries
):
    nodes = make_nodes(3)
    run = launch(nodes, [Step("health")])
    commands = list(run.commands.order_by("node_id"))
    for command in commands:
        started(command)
    heard.clear()

    def progress(command: Command, step: int) -> tuple[int, protocol.CommandUpdate]:
        line = protocol.CheckProgress(check="health", fraction=step / 10, step=f"step {step}")
        return command.node_id, protocol.CommandUpdate(key=command.key, line=line)

    with CaptureQueriesContext(connection) as one_line_each:
        reports.store_reports([progress(c, 1) for c in commands])
    # The earlier lines are replaced, not written: the queries of one line each.
    with django_assert_num_queries(len(one_line_each)):
        refusals = reports.store_reports([progress(c, step) for step in range(2, 7) for c in commands])

    assert refusals == [None] * 15
    assert set(run.commands.values_list("fraction", "step")) == {(0.6, "step 6")}
    assert sorted(event.command_id for event in heard) == sorted(c.pk for c in commands * 2)
