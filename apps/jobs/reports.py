"""What agents report about their commands, as the gateway hands it in (apps/gateway/sinks.py): started,
progress and log lines, and how each ended. Each report is applied with a conditional update on the
state it finds, so a repeat (the agent answers every resend) changes nothing twice.

A report names its command by key; a key that is not one of the reporting node's commands is refused
(``UnknownCommand``), never applied to another node's row.
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec
from django.db import transaction
from django.db.models import Case, F, Value, When

from agents import protocol
from apps.core.events import CommandChanged, announce
from apps.jobs import dispatch
from apps.jobs.choices import COMMAND_ACTIVE, CommandOutcome, CommandState
from apps.jobs.models import Command, CommandLogLine

MAX_FAILURES_NAMED = 5


class UnknownCommand(Exception):
    """A report about a key that is not one of this node's commands."""


Report = protocol.CommandStarted | protocol.CommandUpdate | protocol.CommandResult


def store_reports(reports: Sequence[tuple[int, Report]]) -> list[UnknownCommand | None]:
    """Many agents' reports, each ``(node id, report)``, applied in order in one transaction; each
    report's refusal (an unknown key) or None, in order.

    A thousand agents answer one command within a second or two, each with its start, its progress
    and log lines and its result. Applied one report at a time, each was a lookup of its command and
    an update, and the starts of the agents at the back of the queue waited seconds behind them. So
    the starts are applied together (``commands_started``), the other reports' commands are looked up
    in one query, and of one command's progress lines in the batch only the last is written (each
    replaces the one before it)."""
    refusals: list[UnknownCommand | None] = [None] * len(reports)
    starts = [(i, (node_id, m)) for i, (node_id, m) in enumerate(reports) if isinstance(m, protocol.CommandStarted)]
    others = [(i, node_id, m) for i, (node_id, m) in enumerate(reports) if not isinstance(m, protocol.CommandStarted)]
    with transaction.atomic():
        if starts:
            for (i, _), unknown in zip(starts, commands_started([start for _, start in starts]), strict=True):
                refusals[i] = unknown
        found = _commands_named({(node_id, message.key) for _, node_id, message in others})
        last_progress = {
            (node_id, message.key): i
            for i, node_id, message in others
            if isinstance(message, protocol.CommandUpdate) and isinstance(message.line, protocol.CheckProgress)
        }
        for i, node_id, message in others:
            command = found.get((node_id, message.key))
            if command is None:
                refusals[i] = _unknown(message.key)
            elif isinstance(message, protocol.CommandResult):
                _apply_result(command, message)
            elif not isinstance(message.line, protocol.CheckProgress) or last_progress[(node_id, message.key)] == i:
                _apply_update(command, message)
    return refusals


def store_report(node_id: int, message: Report) -> None:
    """One report of one node, as ``store_reports`` applies it; an unknown key raises ``UnknownCommand``."""
    if (refused := store_reports([(node_id, message)])[0]) is not None:
        raise refused


def commands_started(reports: Sequence[tuple[int, protocol.CommandStarted]]) -> list[UnknownCommand | None]:
    """Many agents' ``CommandStarted``, in three queries whatever their number: a thousand agents
    acknowledge one run's commands within a second, and one lookup, update and commit each queued
    them behind each other on the gateway's database thread for seconds. Each report's refusal (an
    unknown key), or None, in order; the started ones are announced once committed."""
    keys = {message.key for _, message in reports}  # unique: a key names one node's command
    found = {(c.node_id, c.key): c for c in Command.objects.filter(key__in=keys).only("run_id", "node_id", "key")}
    starts = {}
    refusals: list[UnknownCommand | None] = []
    for node_id, message in reports:
        command = found.get((node_id, message.key))
        refusals.append(None if command is not None else _unknown(message.key))
        if command is not None:
            starts.setdefault(command.pk, (command, _time(message.started)))  # the first of repeats
    with transaction.atomic():
        # In key order, and not the model's default order, which joins the nodes to sort by hostname
        # and so locked the nodes' rows too: the bookkeeper's liveness UPDATE of the same nodes
        # deadlocked with a fleet's acknowledgements (benchmarks/dispatch.py at 100 agents).
        sent = list(
            Command.objects.select_for_update()
            .filter(pk__in=starts, state=CommandState.SENT)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        if sent:
            Command.objects.filter(pk__in=sent).update(
                state=CommandState.RUNNING,
                started_at=Case(*(When(pk=pk, then=Value(starts[pk][1])) for pk in sent)),
            )
        for pk in sent:
            command = starts[pk][0]
            announce(CommandChanged(pk, command.run_id, command.node_id, "started"))
    return refusals


def _apply_update(command: Command, message: protocol.CommandUpdate) -> None:
    node_id = command.node_id
    line = message.line
    if isinstance(line, protocol.CheckProgress):
        changed = Command.objects.filter(pk=command.pk, state__in=COMMAND_ACTIVE).update(
            fraction=line.fraction, step=line.step, progress_message=line.message
        )
        if changed:
            announce(CommandChanged(command.pk, command.run_id, node_id, "progress"))
        return
    with transaction.atomic():
        if command.log_lines.count() >= CommandLogLine.MAX_LOG_LINES:
            Command.objects.filter(pk=command.pk).update(log_lines_dropped=F("log_lines_dropped") + 1)
            return
        CommandLogLine.objects.create(command=command, level=line.level, message=line.message)
    announce(CommandChanged(command.pk, command.run_id, node_id, "log"))


def _apply_result(command: Command, message: protocol.CommandResult) -> None:
    """Store how the command ended and end it (succeeded, failed, or cancelled when the agent stopped it
    on a cancel); then its run is judged and its node advanced (a task). A command already ended by a
    cancel or its deadline keeps its state, gains what the agent had, and stops being asked about."""
    node_id = command.node_id
    state, reason = judge(message, command)
    fields = {
        "outcome": message.outcome,
        "exit_code": message.exit_code,
        "result": msgspec.to_builtins(message.result) if message.result is not None else None,
        "output": message.output,
        "started_at": _time(message.started) if message.started is not None else command.started_at,
    }
    with transaction.atomic():
        ended = Command.objects.filter(pk=command.pk, state__in=COMMAND_ACTIVE).update(
            state=state, finished_at=_time(message.finished), reason=reason[:2000], fraction=1.0, **fields
        )
        if not ended:  # cancelled or expired meanwhile, or a repeat of a result already stored
            Command.objects.filter(pk=command.pk, stop_requested_at__isnull=False).update(
                stop_requested_at=None, **fields
            )
            return
        announce(CommandChanged(command.pk, command.run_id, node_id, "state"))
        dispatch.queue_follow_up(command)


def judge(message: protocol.CommandResult, command: Command) -> tuple[str, str]:
    """The state a command ends in from the agent's report, and why, in words."""
    match message.outcome:
        case CommandOutcome.EXITED if message.exit_code == 0:
            return CommandState.SUCCEEDED, _passed(message.result)
        case CommandOutcome.EXITED if message.exit_code == 1 and message.result is not None:
            return CommandState.FAILED, f"the check failed: {_failures(message.result)}"
        case CommandOutcome.EXITED:
            why = message.result.error if message.result is not None and message.result.error else _last(message)
            return CommandState.FAILED, f"exit code {message.exit_code}: {why}"
        case CommandOutcome.TIMED_OUT:
            return CommandState.FAILED, f"ran past its time limit of {command.time_limit_s} s; the agent stopped it"
        case CommandOutcome.CANCELLED:
            return CommandState.CANCELLED, f"stopped by the agent: {message.detail or 'cancelled'}"
        case CommandOutcome.LOST:
            return CommandState.FAILED, f"lost: {message.detail or 'the agent restarted while it ran'}; not run again"
        case _:
            return CommandState.FAILED, f"refused by the agent: {message.detail or 'no reason given'}"


def _passed(result: protocol.CheckResult | None) -> str:
    if result is None:
        return "exited 0"
    if result.skipped:
        return f"skipped: {result.skipped}"
    return "passed" if result.passed else "ran; nothing judged on the node"


def _failures(result: protocol.CheckResult) -> str:
    failed = [m for m in result.measurements if m.passed is False]
    named = ", ".join(
        f"{m.name}{f' on GPU {m.gpu}' if m.gpu is not None else ''} "
        f"({m.measured:g} {'<' if m.bound == 'at_least' else '>'} {m.expected:g} {m.unit})"
        for m in failed[:MAX_FAILURES_NAMED]
    )
    more = f" and {len(failed) - MAX_FAILURES_NAMED} more" if len(failed) > MAX_FAILURES_NAMED else ""
    return (named + more) or result.error or "failed"


def _last(message: protocol.CommandResult) -> str:
    lines = [line for line in message.output.splitlines() if line.strip()]
    return lines[-1][:500] if lines else message.detail or "no output"


def _commands_named(named: set[tuple[int, str]]) -> dict[tuple[int, str], Command]:
    """The commands of these ``(node id, key)``, one query; a key of another node's command is not found."""
    if not named:
        return {}
    commands = Command.objects.filter(key__in={key for _, key in named}).order_by()
    fields = commands.only("run_id", "node_id", "key", "time_limit_s", "started_at")
    return {(c.node_id, c.key): c for c in fields if (c.node_id, c.key) in named}


def _unknown(key: str) -> UnknownCommand:
    return UnknownCommand(f"No command {key!r} was sent to this node.")


def _time(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)
