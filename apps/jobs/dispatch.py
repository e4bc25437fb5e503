"""Getting commands to their nodes and runs to their end: what the jobs' Celery tasks do (tasks.py),
as plain functions of the rows, each safe to run twice or in two workers at once.

- **Start** a run: claim it (pending → running), then advance its nodes.
- **Advance** a node: send the commands it may take now. A node takes a run's steps in order, one
  at a time, and one invasive command at a time whichever run it belongs to (the database refuses a
  second: ``jobs_command_one_invasive_at_a_time``). An offline node's commands wait.
- **Send** is a conditional update (pending → sent, ``attempts`` + 1), then, once committed, the frame
  goes to the gateway (``CommandsDispatched``), which carries it to the node's socket. Delivery is at
  least once: an unanswered command is sent again every ``JOBS_ACK_TIMEOUT_S`` while its node is
  online, everything the agent has is sent again when it reconnects (``frames_on_connect``), and the
  agent answers a key it has seen with what it has, never running it twice.
- **Expire** what is open at its deadline, with where it was as the reason.
- **Judge** a run once every command is over.

``sweep`` does all of it for every row, every ``JOBS_SWEEP_S``: whatever a lost task, a dead worker or
a restarted broker left undone is done there.
"""

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q

from agents import protocol
from apps.accounts.audit import record
from apps.core.events import RunChanged, announce
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from apps.jobs import queue
from apps.jobs.choices import COMMAND_ACTIVE, COMMAND_OPEN, CommandState, RunState
from apps.jobs.models import Command, Run, send_frames

logger = logging.getLogger(__name__)

ACTOR = "system:jobs"
OVERDUE_GRACE = timedelta(seconds=30)  # past its time limit by this much, a running command is asked about


def ack_timeout() -> timedelta:
    return timedelta(seconds=settings.JOBS_ACK_TIMEOUT_S)


# Start and advance ----------------------------------------------------------------------------


def start_run(run_id: int, now: datetime) -> bool:
    """Claim a pending run and send what its nodes can take. False when it was started already (a
    repeated task), which still advances its nodes: that is harmless, and finishes an interrupted start."""
    started = bool(Run.objects.filter(pk=run_id, state=RunState.PENDING).update(state=RunState.RUNNING, started_at=now))
    if started:
        announce(RunChanged(run_id, "started"))
    advance_nodes(Command.objects.filter(run_id=run_id).values_list("node_id", flat=True).distinct(), now)
    return started


def advance_nodes(node_ids: Iterable[int], now: datetime) -> list[Command]:
    """Send every command these nodes may take now; return those sent."""
    online = Node.objects.filter(pk__in=list(node_ids), liveness=Liveness.ONLINE).values_list("pk", flat=True)
    queued = (
        Command.objects.filter(node_id__in=list(online), run__state=RunState.RUNNING, state__in=COMMAND_OPEN)
        .order_by("node_id", "run_id", "sequence")
        .only("pk", "node_id", "run_id", "state", "invasive")
    )
    by_node: defaultdict[int, list[Command]] = defaultdict(list)
    for command in queued:
        by_node[command.node_id].append(command)
    sent = _claim_sends([command.pk for commands in by_node.values() for command in _takes_now(commands)], now)
    send_frames(sent, [])
    return sent


def _takes_now(commands: Sequence[Command]) -> list[Command]:
    """Of one node's open commands, in run and step order, those it may be sent now: each run's first
    open step, when it is still pending, and among those at most one invasive, none if the node has one."""
    invasive_busy = any(command.invasive and command.state in COMMAND_ACTIVE for command in commands)
    seen_runs: set[int] = set()
    chosen = []
    for command in commands:
        if command.run_id in seen_runs:
            continue  # a later step of a run whose current step is not over
        seen_runs.add(command.run_id)
        if command.state != CommandState.PENDING:
            continue
        if command.invasive:
            if invasive_busy:
                continue
            invasive_busy = True
        chosen.append(command)
    return chosen


def _claim_sends(pks: Sequence[int], now: datetime) -> list[Command]:
    """Claim these commands for sending (pending → sent, ``attempts`` + 1); return those claimed, whole.

    One UPDATE for all of them: a run's start on a thousand nodes was a transaction and a read per
    command, seconds of the start task's before the first frame went out. Claimed are the rows this
    UPDATE moved, found by their new ``sent_at`` in the same transaction. When the database refuses
    the batch (another worker just gave one of the nodes an invasive command), each is claimed alone,
    and only that node's is refused."""
    if not pks:
        return []
    try:
        with transaction.atomic():
            Command.objects.filter(pk__in=pks, state=CommandState.PENDING).update(
                state=CommandState.SENT, attempts=F("attempts") + 1, sent_at=now
            )
            return list(Command.objects.filter(pk__in=pks, state=CommandState.SENT, sent_at=now).order_by("pk"))
    except IntegrityError:
        if len(pks) == 1:
            return []
        return [command for pk in pks for command in _claim_sends([pk], now)]


def commands_finished(command_ids: Sequence[int], now: datetime) -> None:
    """Commands are over: judge their runs and send their nodes what they may take next."""
    ended = list(Command.objects.filter(pk__in=list(command_ids)).values_list("run_id", "node_id"))
    runs, nodes = {run_id for run_id, _ in ended}, {node_id for _, node_id in ended}
    judge_runs(sorted(runs), now)
    advance_nodes(sorted(nodes), now)


# What an agent is told when it connects -------------------------------------------------------


def frames_on_connect(node_id: int, now: datetime) -> list[bytes]:
    """Everything a node's agent should have, for the gateway to send after the Welcome: the commands
    it was sent and may not have (it answers each with what it has), and cancels it has not answered.
    Commands waiting for the node are advanced by a task. One query when there is nothing."""
    return frames_on_connect_of([node_id], now)[node_id]


def frames_on_connect_of(node_ids: Sequence[int], now: datetime) -> dict[int, list[bytes]]:
    """``frames_on_connect`` for many nodes whose agents connected together: one query when there is nothing."""
    commands = (
        Command.objects.filter(node_id__in=node_ids)
        .filter(Q(state__in=COMMAND_OPEN) | Q(stop_requested_at__isnull=False))
        .order_by("node_id", "run_id", "sequence")
    )
    frames: dict[int, list[bytes]] = {node_id: [] for node_id in node_ids}
    resent, waiting = [], set()
    for command in commands:
        if command.state == CommandState.PENDING:
            waiting.add(command.node_id)
            continue
        frames[command.node_id].append(
            protocol.encode(command.cancel_message() if command.stop_requested_at else command.message())
        )
        resent.append(command.pk)
    if resent:
        Command.objects.filter(pk__in=resent).update(sent_at=now)
        Command.objects.filter(pk__in=resent, state=CommandState.SENT).update(attempts=F("attempts") + 1)
    for node_id in sorted(waiting):
        queue.advance_node(node_id)
    return frames


# The sweep ------------------------------------------------------------------------------------


def sweep(now: datetime) -> dict[str, int]:
    """Everything left undone, for every row: start pending runs, expire what is past its deadline,
    send again what is unanswered, advance every node with waiting commands, judge finished runs."""
    pending_runs = list(Run.objects.filter(state=RunState.PENDING).values_list("pk", flat=True))
    for run_id in pending_runs:
        start_run(run_id, now)
    expired = expire(now)
    resent = resend(now)
    waiting = Command.objects.filter(state=CommandState.PENDING, run__state=RunState.RUNNING)
    advanced = advance_nodes(waiting.values_list("node_id", flat=True).distinct(), now)
    running = Run.objects.filter(state=RunState.RUNNING).values_list("pk", flat=True)
    judged = judge_runs(list(running), now)
    return {
        "started": len(pending_runs),
        "expired": len(expired),
        "resent": len(resent),
        "sent": len(advanced),
        "judged": len(judged),
    }


def expire(now: datetime) -> list[Command]:
    """End every open command past its deadline as expired, saying where it was; audited per run."""
    expired: defaultdict[Run, list[Command]] = defaultdict(list)
    for command in Command.objects.open().filter(deadline__lte=now).select_related("node", "run"):
        if command.stop(CommandState.EXPIRED, expiry_reason(command), now):
            expired[command.run].append(command)
    for run, commands in expired.items():
        record(
            "run.commands_expired",
            actor=ACTOR,
            obj=run,
            commands={c.node.hostname: f"{c.check_name}: {c.reason}" for c in commands[:50]},
            count=len(commands),
        )
    return [command for commands in expired.values() for command in commands]


def expiry_reason(command: Command) -> str:
    node = command.node
    if command.state == CommandState.PENDING and node.liveness != Liveness.ONLINE:
        seen = f", last seen {node.last_seen_at:%Y-%m-%d %H:%M:%S} UTC" if node.last_seen_at else ", never seen"
        return f"expired at its deadline: {node} was {node.get_liveness_display().lower()}{seen}, and never took it"
    if command.state == CommandState.PENDING:
        return f"expired at its deadline before its turn on {node}: the node's earlier commands were still running"
    if command.state == CommandState.SENT:
        return (
            f"expired at its deadline: sent {command.attempts} time(s) and never acknowledged by {node}'s agent "
            f"({node.get_liveness_display().lower()})"
        )
    return f"expired at its deadline while running on {node}; the agent was told to stop it"


def resend(now: datetime) -> list[Command]:
    """Send again, to online nodes: commands not acknowledged within ``JOBS_ACK_TIMEOUT_S`` (another
    attempt), running ones past their time limit (the agent answers with the result it kept), and
    cancels not yet answered."""
    quiet_since = now - ack_timeout()
    candidates = Command.objects.filter(node__liveness=Liveness.ONLINE, sent_at__lt=quiet_since).filter(
        Q(state__in=COMMAND_ACTIVE) | Q(stop_requested_at__isnull=False)
    )
    commands, cancels = [], []
    for command in candidates:
        if command.stop_requested_at is not None:
            cancels.append(command)
        elif command.state == CommandState.SENT or _overdue(command, now):
            commands.append(command)
    resent = [c for c in [*commands, *cancels] if _mark_resent(c, now)]
    send_frames([c for c in resent if c in commands], [c for c in resent if c in cancels])
    return resent


def _overdue(command: Command, now: datetime) -> bool:
    started = command.started_at or command.sent_at
    return started is not None and now > started + timedelta(seconds=command.time_limit_s) + OVERDUE_GRACE


def _mark_resent(command: Command, now: datetime) -> bool:
    unchanged = Command.objects.filter(pk=command.pk, state=command.state, sent_at=command.sent_at)
    attempts = F("attempts") + 1 if command.state == CommandState.SENT else F("attempts")
    return bool(unchanged.update(sent_at=now, attempts=attempts))


# Judging ---------------------------------------------------------------------------------------


def judge_runs(run_ids: Sequence[int], now: datetime) -> list[Run]:
    """End each running run whose commands are all over: succeeded when all did, else failed, with a
    reason naming what did not. Audited and announced; a run judged already is left alone."""
    judged = []
    # A run with a command still open is passed over before its commands are counted: every command's
    # end asks (commands_finished), and counting all of a 1,000-node run's commands at each of its
    # thousands of ends is quadratic in the run's size; finding one open command stops at the first.
    over = [pk for pk in run_ids if not Command.objects.filter(run_id=pk, state__in=COMMAND_OPEN).exists()]
    for run in Run.objects.filter(pk__in=over, state=RunState.RUNNING).with_counts():
        state, reason = verdict(run)
        if Run.objects.filter(pk=run.pk, state=RunState.RUNNING).update(state=state, finished_at=now, reason=reason):
            run.state, run.finished_at, run.reason = state, now, reason
            record("run.finish", actor=ACTOR, obj=run, state=state, reason=reason)
            announce(RunChanged(run.pk, "finished"))
            judged.append(run)
    return judged


def verdict(run: Run) -> tuple[str, str]:
    """The state a run whose commands are all over ends in, and why (``run`` from ``with_counts``)."""
    total = run.command_count
    if run.succeeded_count == total:
        return RunState.SUCCEEDED, f"all {total} commands succeeded"
    counts = ", ".join(
        f"{count} {state}"
        for state in (CommandState.FAILED, CommandState.EXPIRED, CommandState.CANCELLED)
        if (count := getattr(run, f"{state}_count"))
    )
    unsuccessful = run.commands.exclude(state=CommandState.SUCCEEDED).select_related("node")
    examples = "; ".join(f"{c.node} {c.check_name}: {c.reason}" for c in unsuccessful[:5])
    more = f"; and {total - run.succeeded_count - 5} more" if total - run.succeeded_count > 5 else ""
    return RunState.FAILED, f"{counts} of {total} commands: {examples}{more}"[:2000]
