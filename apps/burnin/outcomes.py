"""What a burn-in does as its commands end (the burn-in's Celery tasks call these; each is safe to run
twice or in two workers at once):

- the first health check's snapshot becomes the baseline of the node's last one, before it is sent;
- a node whose steps are all over is judged (judging.py) against the thresholds it started with, its
  verdict recorded where the lifecycle's service gate reads it (``BurnInResult.objects.record``), and
  moved: into service when it passed (its first burn-in, or any started with ``into_service``), into
  quarantine with the failed checks as the reason when it failed, unless its cluster's breaker is open
  or would be by this one (quarantine.py): then it stays in burn-in, withheld, for a person to decide.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef

from apps.accounts.audit import record
from apps.burnin.choices import NodeState, Outcome, Trigger
from apps.burnin.judging import CheckVerdict, judge_command, node_reason
from apps.burnin.models import BurnIn, BurnInCheck, BurnInNode, Suite
from apps.burnin.quarantine import quarantine
from apps.burnin.starting import CannotStart, start_burn_in
from apps.inventory.choices import Lifecycle
from apps.inventory.models import BurnInResult, IllegalTransition, Node
from apps.jobs.choices import COMMAND_FINAL, COMMAND_OPEN, CommandState
from apps.jobs.models import Command

ACTOR = "system:burnin"
ENROLLMENT_DEADLINE = timedelta(hours=6)


def command_over(command_id: int, now: datetime) -> BurnInNode | None:
    """A burn-in's command ended: hand a first health snapshot on, and judge its node once all its
    steps are over. Returns the node's row when it was judged now."""
    command = Command.objects.filter(pk=command_id, state__in=COMMAND_FINAL).first()
    if command is None:
        return None
    if command.check_name == "health" and command.state == CommandState.SUCCEEDED:
        hand_on_baseline(command)
    row = BurnInNode.objects.filter(burn_in__run_id=command.run_id, node_id=command.node_id).first()
    return judge_node(row.pk, now) if row is not None else None


def hand_on_baseline(command: Command) -> int:
    """The node's later health steps of this run, not yet sent, take this one's snapshot as their
    baseline (the health check then judges what rose during the burn-in)."""
    snapshot = ((command.result or {}).get("evidence") or {}).get("snapshot")
    if not snapshot:
        return 0
    later = Command.objects.filter(
        run_id=command.run_id,
        node_id=command.node_id,
        check_name="health",
        sequence__gt=command.sequence,
        state=CommandState.PENDING,
    )
    handed = 0
    for step in later:
        if "baseline" not in step.params:
            params = {**step.params, "baseline": snapshot}
            handed += Command.objects.filter(pk=step.pk, state=CommandState.PENDING).update(params=params)
    return handed


def judge_node(row_id: int, now: datetime) -> BurnInNode | None:
    """Judge a node of a burn-in whose commands are all over, record it and move it; None when it is
    not over yet, or was judged already."""
    with transaction.atomic():
        row = (
            # Its own row only: the rows joined for reading (the suite, the node type, the node) are
            # every judging's, and locked too they queued the fleet's judgings behind each other.
            BurnInNode.objects.select_for_update(of=("self",))
            .select_related("burn_in__suite", "thresholds", "node__node_type")
            .filter(pk=row_id, state=NodeState.TESTING)
            .first()
        )
        if row is None:
            return None
        commands = list(Command.objects.filter(run_id=row.burn_in.run_id, node_id=row.node_id).order_by("sequence"))
        if any(command.state in COMMAND_OPEN for command in commands):
            return None
        rules = row.thresholds.rules_by_measurement()
        gpu_node = row.node.node_type.gpus_per_node > 0
        verdicts = [(c, judge_command(c, rules, gpu_node=gpu_node)) for c in commands]
        BurnInCheck.objects.bulk_create(
            BurnInCheck(
                burn_in_node=row,
                command=c,
                sequence=c.sequence,
                check_name=c.check_name,
                passed=v.passed,
                reasons=v.reasons,
                judged=v.judged,
                summary=v.summary[:2000],
            )
            for c, v in verdicts
        )
        passed = not any(v.passed is False for _, v in verdicts) and any(v.passed for _, v in verdicts)
        _settle(row, passed, [(c.check_name, v) for c, v in verdicts], now)
    return row


def _settle(row: BurnInNode, passed: bool, verdicts: list[tuple[str, CheckVerdict]], now: datetime) -> None:
    burn_in, node = row.burn_in, row.node
    reason = (
        f"passed {burn_in} against {row.thresholds}"
        if passed
        else f"failed {burn_in} against {row.thresholds}: {node_reason(verdicts) or 'nothing it ran passed'}"
    )
    row.result = BurnInResult.objects.record(
        node, passed=passed, run=str(burn_in), summary=reason[:5000], finished_at=now
    )
    row.state, row.reason, row.judged_at = (NodeState.PASSED if passed else NodeState.FAILED), reason, now
    node.refresh_from_db()
    if node.lifecycle != Lifecycle.BURN_IN:
        row.outcome = Outcome.LEFT  # someone moved it while it was tested: their decision stands
    elif passed and (burn_in.into_service or row.lifecycle_before == Lifecycle.NEW):
        row.outcome = _into_service(node, reason)
    elif passed:
        row.outcome = Outcome.KEPT
    else:
        row.outcome = Outcome.QUARANTINED if quarantine(node, reason=reason, actor=ACTOR, now=now) else Outcome.WITHHELD
    row.save(update_fields=["result", "state", "reason", "judged_at", "outcome"])
    record(
        "burnin.judge",
        actor=ACTOR,
        obj=node,
        burn_in=burn_in.pk,
        passed=passed,
        outcome=row.outcome,
        thresholds=row.thresholds_id,
        reason=reason[:2000],
    )


def _into_service(node: Node, reason: str) -> str:
    try:
        node.transition(Lifecycle.IN_SERVICE, actor=ACTOR, reason=reason)
    except IllegalTransition:
        return Outcome.LEFT
    record("node.into_service", actor=ACTOR, obj=node, reason=reason[:2000])
    return Outcome.IN_SERVICE


def sweep(now: datetime) -> int:
    """Judge every node still testing whose commands are all over (a task that was lost); how many."""
    still_open = Command.objects.filter(
        run_id=OuterRef("burn_in__run_id"), node_id=OuterRef("node_id"), state__in=COMMAND_OPEN
    )
    over = BurnInNode.objects.filter(state=NodeState.TESTING).exclude(Exists(still_open))
    return sum(judge_node(pk, now) is not None for pk in over.values_list("pk", flat=True))


def burn_in_new_node(node_id: int, now: datetime) -> BurnIn | None:
    """A new node's agent came online for the first time: run the enrollment suite on it
    (``BURNIN_ON_ENROLLMENT``), once. None when there is nothing to do."""
    name = settings.BURNIN_ON_ENROLLMENT
    suite = Suite.objects.filter(name=name).first() if name else None
    node = Node.objects.filter(pk=node_id, lifecycle=Lifecycle.NEW).first()
    if suite is None or node is None or BurnInNode.objects.filter(node=node).exists():
        return None
    try:
        burn_in = start_burn_in(
            [node],
            suite,
            actor=ACTOR,
            deadline=now + ENROLLMENT_DEADLINE,
            trigger=Trigger.ENROLLMENT,
            idempotency_key=f"burn-in-on-enrollment:{node.pk}",
        )
    except (CannotStart, IntegrityError):  # moved by a person meanwhile; or started by a twin task
        return None
    record("burnin.start", actor=ACTOR, obj=burn_in.run, suite=suite.name, nodes=[node.hostname], trigger="enrollment")
    return burn_in
