"""What agents report about their commands, as the gateway hands it in (apps/gateway/sinks.py): started,
progress and log lines, and how each ended. Each report is applied to the state its command's row is
in, read and locked in the report's transaction, so a repeat (the agent answers every resend) changes
nothing twice.

A report names its command by key; a key that is not one of the reporting node's commands is refused
(``UnknownCommand``), never applied to another node's row.
"""

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import msgspec
from django.db import transaction
from django.db.models import Case, Count, F, IntegerField, Value, When

from agents import protocol
from apps.core.events import ChangedCommand, CommandChange, CommandsChanged, announce
from apps.jobs import queue
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
    and log lines and its result. Applied one report at a time, each was a lookup of its command, an
    update or two and a commit, each ended command a task queued and a subscriber's query, and the
    starts of the agents at the back of the queue waited seconds behind them (benchmarks/dispatch.py).
    So a batch is applied in the same few queries whatever its size: its commands read and locked at
    once (in key order, commands only), each report played in order against what was read, then each
    kind of change written in one statement, announced in one event, and the ended commands' follow-up
    queued as one task. Of one command's progress lines only the last before its result is written
    (each replaces the one before it)."""
    refusals: list[UnknownCommand | None] = [None] * len(reports)
    with transaction.atomic():
        commands = _commands_locked({(node_id, message.key) for node_id, message in reports})
        batch = _Batch()
        for i, (node_id, message) in enumerate(reports):
            command = commands.get((node_id, message.key))
            if command is None:
                refusals[i] = _unknown(message.key)
            else:
                batch.play(command, message)
        batch.write()
    return refusals


def store_report(node_id: int, message: Report) -> None:
    """One report of one node, as ``store_reports`` applies it; an unknown key raises ``UnknownCommand``."""
    if (refused := store_reports([(node_id, message)])[0]) is not None:
        raise refused


class _Batch:
    """A batch's reports played in order against its commands' rows as read (and locked), as applying
    them one after another would change them; ``write`` then stores what changed, a statement a kind."""

    def __init__(self) -> None:
        self.started: dict[int, Command] = {}
        self.progress: dict[int, Command] = {}
        self.log_lines: defaultdict[int, list[CommandLogLine]] = defaultdict(list)
        self.ended: dict[int, Command] = {}
        self.stopped: dict[int, Command] = {}  # cancelled or expired meanwhile: what the agent had is kept
        self.commands: dict[int, Command] = {}

    def play(self, command: Command, message: Report) -> None:
        self.commands[command.pk] = command
        match message:
            case protocol.CommandStarted() if command.state == CommandState.SENT:
                command.state, command.started_at = CommandState.RUNNING, _time(message.started)
                self.started[command.pk] = command
            case protocol.CommandUpdate(line=protocol.CheckProgress() as line) if command.state in COMMAND_ACTIVE:
                command.fraction, command.step, command.progress_message = line.fraction, line.step, line.message
                self.progress[command.pk] = command
            case protocol.CommandUpdate(line=protocol.CheckLog() as line):
                self.log_lines[command.pk].append(
                    CommandLogLine(command=command, level=line.level, message=line.message)
                )
            case protocol.CommandResult() if command.state in COMMAND_ACTIVE:
                state, reason = judge(message, command)
                _take_result(command, message)
                command.state, command.reason, command.fraction = state, reason[:2000], 1.0
                command.finished_at = _time(message.finished)
                self.ended[command.pk] = command
            case protocol.CommandResult() if command.stop_requested_at is not None:
                _take_result(command, message)
                command.stop_requested_at = None
                self.stopped[command.pk] = command
            # Otherwise a repeat (a start of a command started, a result of one ended), or progress of one over.

    def write(self) -> None:
        if self.started:
            Command.objects.filter(pk__in=self.started).update(
                state=CommandState.RUNNING,
                started_at=Case(*(When(pk=pk, then=Value(c.started_at)) for pk, c in self.started.items())),
            )
        if self.progress:
            Command.objects.bulk_update(self.progress.values(), ["fraction", "step", "progress_message"])
        logged = self._write_log_lines()
        if self.ended:
            Command.objects.bulk_update(self.ended.values(), [*RESULT_FIELDS, *ENDING_FIELDS])
        if self.stopped:
            Command.objects.bulk_update(self.stopped.values(), [*RESULT_FIELDS, "stop_requested_at"])
        changes: dict[CommandChange, Iterable[int]] = {
            "started": self.started,
            "progress": self.progress,
            "log": logged,
            "state": self.ended,
        }
        for change, pks in changes.items():
            _announce(change, [self.commands[pk] for pk in pks])
        # Once committed: their runs judged and their nodes sent what comes next, one task for them all.
        queue.commands_finished(list(self.ended))

    def _write_log_lines(self) -> list[int]:
        """Keep the lines of each command up to its ``MAX_LOG_LINES``, count the rest; the commands that
        kept any."""
        if not self.log_lines:
            return []
        kept = dict(
            CommandLogLine.objects.filter(command_id__in=self.log_lines)
            .order_by()
            .values("command_id")
            .annotate(lines=Count("pk"))
            .values_list("command_id", "lines")
        )
        keeping, dropped = [], {}
        for pk, lines in self.log_lines.items():
            room = max(0, CommandLogLine.MAX_LOG_LINES - kept.get(pk, 0))
            keeping += lines[:room]
            if len(lines) > room:
                dropped[pk] = len(lines) - room
        CommandLogLine.objects.bulk_create(keeping)
        if dropped:
            Command.objects.filter(pk__in=dropped).update(
                log_lines_dropped=F("log_lines_dropped")
                + Case(*(When(pk=pk, then=Value(n)) for pk, n in dropped.items()), output_field=IntegerField())
            )
        return [pk for pk, lines in self.log_lines.items() if pk not in dropped or len(lines) > dropped[pk]]


RESULT_FIELDS = ("outcome", "exit_code", "result", "output", "started_at")
ENDING_FIELDS = ("state", "reason", "fraction", "finished_at")


def _take_result(command: Command, message: protocol.CommandResult) -> None:
    """What the agent had, kept on the row whatever the command's state (``RESULT_FIELDS``)."""
    command.outcome, command.exit_code, command.output = message.outcome, message.exit_code, message.output
    command.result = msgspec.to_builtins(message.result) if message.result is not None else None
    if message.started is not None:
        command.started_at = _time(message.started)


def _announce(change: CommandChange, commands: Sequence[Command]) -> None:
    if commands:
        announce(CommandsChanged(change, tuple(ChangedCommand(c.pk, c.run_id, c.node_id) for c in commands)))


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


def _commands_locked(named: set[tuple[int, str]]) -> dict[tuple[int, str], Command]:
    """The commands of these ``(node id, key)``, read and locked in one query; a key of another node's
    command is not found. Locked in key order, and not the model's default order, which joins the
    nodes to sort by hostname and so locked the nodes' rows too: the bookkeeper's liveness UPDATE of
    the same nodes deadlocked with a fleet's acknowledgements (benchmarks/dispatch.py at 100 agents)."""
    commands = Command.objects.select_for_update().filter(key__in={key for _, key in named}).order_by("pk")
    fields = commands.only("run_id", "node_id", "key", "state", "time_limit_s", "started_at", "stop_requested_at")
    return {(c.node_id, c.key): c for c in fields if (c.node_id, c.key) in named}


def _unknown(key: str) -> UnknownCommand:
    return UnknownCommand(f"No command {key!r} was sent to this node.")


def _time(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)
