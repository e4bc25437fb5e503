"""Runs and their commands: the rows that are the truth of what the control plane asked nodes to do.

A run is written with all its commands, one per node and step, in one transaction, before anything
is queued (``Run.objects.launch``); Celery and Redis only carry what these rows say. Every change of
state is a conditional update on the state read, so two workers (or a worker and the gateway) acting
on one row change it once. The moves themselves are in ``dispatch.py`` (sending, deadlines, judging)
and ``reports.py`` (what agents answer); cancelling is here, for the API, the CLI and the UI alike.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models, transaction
from django.db.models import Case, Count, Q, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents import protocol
from apps.core.events import AgentFrame, ChangedCommand, CommandsChanged, CommandsDispatched, RunChanged, announce
from apps.inventory.models import Node
from apps.jobs import queue
from apps.jobs.choices import (
    CHECK_CHOICES,
    COMMAND_ACTIVE,
    COMMAND_FINAL,
    NON_INVASIVE_CHECKS,
    RUN_FINAL,
    CommandOutcome,
    CommandState,
    RunKind,
    RunState,
)


class IllegalRunChange(Exception):
    """A cancel (or other change) the run's or command's state does not allow; the message says why."""


@dataclass(frozen=True)
class Step:
    """One step every node of a run takes: a check with its parameters, its time limit on the node and
    the environment it runs with (``NCCL_*`` and the like)."""

    check: str
    params: dict[str, Any] = field(default_factory=dict)
    time_limit_s: int = 600
    env: dict[str, str] = field(default_factory=dict)

    @property
    def invasive(self) -> bool:
        return self.check not in NON_INVASIVE_CHECKS

    def as_json(self) -> dict[str, Any]:
        return {"check": self.check, "params": self.params, "time_limit_s": self.time_limit_s, "env": self.env}


def new_key() -> str:
    """A command's idempotency key: random, so a key is never reused, even by a database started afresh
    under agents that still remember the keys they ran."""
    return uuid.uuid4().hex


class RunQuerySet(models.QuerySet["Run"]):
    def launch(
        self,
        *,
        nodes: Sequence[Node],
        steps: Sequence[Step],
        deadline: datetime,
        actor: str,
        user: AbstractBaseUser | None = None,
        title: str = "",
        kind: str = RunKind.CHECKS,
        idempotency_key: str | None = None,
    ) -> "Run":
        """Write the run and its commands (every node takes every step, in order), then, once that is
        committed, queue its start. Auditing stays with the caller (the API request, an automation)."""
        with transaction.atomic():
            run = self.create(
                kind=kind,
                title=title,
                steps=[step.as_json() for step in steps],
                deadline=deadline,
                actor=actor[:150],
                created_by=user,
                idempotency_key=idempotency_key,
            )
            Command.objects.bulk_create(
                Command(
                    run=run,
                    node=node,
                    sequence=sequence,
                    key=new_key(),
                    check_name=step.check,
                    params=step.params,
                    env=step.env,
                    invasive=step.invasive,
                    time_limit_s=step.time_limit_s,
                    deadline=deadline,
                )
                for node in nodes
                for sequence, step in enumerate(steps)
            )
            queue.start_run(run.pk)
        return run

    def with_counts(self) -> "RunQuerySet":
        """Each run with how many of its commands are in each state, its nodes, and ``progress_sum``
        (1 for each command over, its fraction for each running): one query."""
        counts = {f"{state}_count": Count("commands", filter=Q(commands__state=state)) for state in CommandState.values}
        progress = Case(
            When(commands__state__in=COMMAND_FINAL, then=Value(1.0)),
            When(commands__state__in=COMMAND_ACTIVE, then=Coalesce("commands__fraction", Value(0.0))),
            default=Value(0.0),
            output_field=models.FloatField(),
        )
        return self.select_related("created_by").annotate(
            command_count=Count("commands"),
            node_count=Count("commands__node", distinct=True),
            progress_sum=Coalesce(Sum(progress), Value(0.0)),
            **counts,
        )


class Run(models.Model):
    """A set of commands, one per node and step: a burn-in of 64 nodes, a health sweep, later an NCCL
    sweep or a training launch. Done when every command is; judged from them."""

    kind = models.CharField(max_length=16, choices=RunKind.choices, default=RunKind.CHECKS)
    title = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.PENDING, editable=False)
    steps = models.JSONField(default=list, help_text="What every node runs, in order, as the run was asked for.")
    deadline = models.DateTimeField(help_text="Commands not finished by then expire, with the reason.")
    idempotency_key = models.CharField(
        max_length=128,
        unique=True,
        null=True,
        blank=True,
        help_text="The client's key: a request repeated with it returns the run it made, never a second one.",
    )
    actor = models.CharField(max_length=150, help_text="Username or 'system:<what>' that started it.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    started_at = models.DateTimeField(null=True, blank=True, editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    reason = models.CharField(max_length=2000, blank=True, editable=False, help_text="How it ended, and why.")
    cancelled_by = models.CharField(max_length=150, blank=True, editable=False)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "created_at"])]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.title or self.kind})"

    @property
    def is_final(self) -> bool:
        return self.state in RUN_FINAL

    def cancel(self, *, actor: str, reason: str = "") -> list["Command"]:
        """Cancel the run: its waiting commands at once, those an agent has are stopped there (the agent
        kills the command's process group and reports what it had). Returns the commands cancelled.
        Raises IllegalRunChange for a run that is over."""
        with transaction.atomic():
            now = timezone.now()
            claimed = (
                Run.objects.filter(pk=self.pk)
                .exclude(state__in=RUN_FINAL)
                .update(
                    state=RunState.CANCELLED,
                    finished_at=now,
                    cancelled_by=actor[:150],
                    reason=_cancel_reason(actor, reason),
                )
            )
            if not claimed:
                self.refresh_from_db()
                raise IllegalRunChange(f"{self} is {self.get_state_display().lower()}; there is nothing to cancel.")
            cancelled = [
                command
                for command in self.commands.exclude(state__in=COMMAND_FINAL).select_related("node")
                if command.stop(CommandState.CANCELLED, _cancel_reason(actor, reason), now)
            ]
            announce(RunChanged(self.pk, "finished"))
        self.refresh_from_db()
        return cancelled


def _cancel_reason(actor: str, reason: str) -> str:
    reason = reason.strip()
    return f"cancelled by {actor}" + (f": {reason}" if reason else "")


class CommandQuerySet(models.QuerySet["Command"]):
    def open(self) -> "CommandQuerySet":
        return self.exclude(state__in=COMMAND_FINAL)

    def stopping(self) -> "CommandQuerySet":
        """Cancelled or expired while an agent had them; the agent has not yet said it stopped them."""
        return self.filter(stop_requested_at__isnull=False)


class Command(models.Model):
    """One step of a run on one node. ``key`` is its idempotency key: the agent runs a key once, keeps
    it on disk, and answers every repeat with what it has (started, or the stored result)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="commands")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="commands")
    sequence = models.PositiveSmallIntegerField(help_text="The step's place in the run; a node takes them in order.")
    key = models.CharField(max_length=64, unique=True, editable=False)
    check_name = models.CharField(max_length=32, choices=CHECK_CHOICES)
    params = models.JSONField(default=dict, blank=True)
    env = models.JSONField(default=dict, blank=True)
    invasive = models.BooleanField(default=True, help_text="Loads the node: one such command at a time per node.")
    time_limit_s = models.PositiveIntegerField(help_text="How long the agent lets it run before stopping it.")
    deadline = models.DateTimeField(help_text="Not finished by then: expired.")
    state = models.CharField(max_length=16, choices=CommandState.choices, default=CommandState.PENDING, editable=False)
    attempts = models.PositiveIntegerField(default=0, editable=False, help_text="How many times it was sent.")
    sent_at = models.DateTimeField(null=True, blank=True, editable=False, help_text="Last sent.")
    started_at = models.DateTimeField(null=True, blank=True, editable=False, help_text="The agent started it.")
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    fraction = models.FloatField(null=True, blank=True, editable=False, help_text="Progress, 0 to 1.")
    step = models.CharField(max_length=128, blank=True, editable=False, help_text="What it is doing now.")
    progress_message = models.CharField(max_length=500, blank=True, editable=False)
    outcome = models.CharField(max_length=16, choices=CommandOutcome.choices, blank=True, editable=False)
    exit_code = models.SmallIntegerField(null=True, blank=True, editable=False)
    result = models.JSONField(null=True, blank=True, editable=False, help_text="The check's own result.")
    output = models.TextField(blank=True, editable=False, help_text="The end of what the process wrote to stderr.")
    reason = models.CharField(max_length=2000, blank=True, editable=False, help_text="Why it ended as it did.")
    stop_requested_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Cancelled or expired while an agent had it, not yet stopped."
    )
    log_lines_dropped = models.PositiveIntegerField(default=0, editable=False)

    objects = CommandQuerySet.as_manager()

    class Meta:
        ordering = ["run", "node__hostname", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["run", "node", "sequence"], name="jobs_command_one_per_node_and_step"),
            # The database itself refuses a second invasive command in the agent's hands on one node,
            # whichever worker tries to send it.
            models.UniqueConstraint(
                fields=["node"],
                condition=Q(invasive=True, state__in=sorted(COMMAND_ACTIVE)),
                name="jobs_command_one_invasive_at_a_time",
            ),
        ]
        indexes = [models.Index(fields=["node", "state"]), models.Index(fields=["state", "deadline"])]

    def __str__(self) -> str:
        return f"{self.check_name} on {self.node} (run {self.run_id}, step {self.sequence + 1})"

    @property
    def is_final(self) -> bool:
        return self.state in COMMAND_FINAL

    def message(self) -> protocol.Command:
        """What the agent is sent."""
        return protocol.Command(
            key=self.key,
            check=self.check_name,  # type: ignore[arg-type]  (a CheckName: the field's choices)
            params=self.params,
            env=self.env,
            time_limit_s=self.time_limit_s,
            deadline=self.deadline.timestamp(),
            invasive=self.invasive,
        )

    def cancel_message(self) -> protocol.Cancel:
        return protocol.Cancel(key=self.key, reason=self.reason[:2000])

    def cancel(self, *, actor: str, reason: str = "") -> None:
        """Cancel this one command (the rest of its run goes on). Raises IllegalRunChange once it is over."""
        with transaction.atomic():
            if not self.stop(CommandState.CANCELLED, _cancel_reason(actor, reason), timezone.now()):
                self.refresh_from_db()
                raise IllegalRunChange(f"{self} is {self.get_state_display().lower()}; there is nothing to cancel.")
            queue.commands_finished([self.pk])  # its run may be over now, and its node free for the next

    def stop(self, to: str, reason: str, now: datetime) -> bool:
        """End an open command as cancelled or expired. One the agent has is also asked to stop there
        (``stop_requested_at``; the Cancel goes out on commit and again until the agent answers). False
        when it was already over."""
        with transaction.atomic():
            open_states = [state for state in CommandState.values if state not in COMMAND_FINAL]
            current = Command.objects.filter(pk=self.pk, state__in=open_states).values_list("state", flat=True).first()
            if current is None:
                return False
            had_it = current in COMMAND_ACTIVE
            changed = Command.objects.filter(pk=self.pk, state=current).update(
                state=to, finished_at=now, reason=reason[:2000], stop_requested_at=now if had_it else None
            )
            if not changed:  # it moved meanwhile (the agent answered): look again
                return self.stop(to, reason, now)
            self.state, self.finished_at, self.reason = to, now, reason[:2000]
            self.stop_requested_at = now if had_it else None
            if had_it:
                send_frames([], [self])
            announce(CommandsChanged("state", (ChangedCommand(self.pk, self.run_id, self.node_id),)))
        return True


class CommandLogLine(models.Model):
    """A log line a command's check wrote, as the agent relayed it (at most MAX_LOG_LINES a command)."""

    MAX_LOG_LINES = 1000

    command = models.ForeignKey(Command, on_delete=models.CASCADE, related_name="log_lines")
    at = models.DateTimeField(default=timezone.now)
    level = models.CharField(max_length=8)
    message = models.CharField(max_length=2000)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["command", "at"])]

    def __str__(self) -> str:
        return f"{self.level}: {self.message[:60]}"


def send_frames(commands: Sequence[Command], cancels: Sequence[Command]) -> None:
    """Hand the commands' frames, and the cancels', to the gateway once committed (at once outside a
    transaction)."""
    frames = [AgentFrame(c.node_id, protocol.encode(c.message())) for c in commands]
    frames += [AgentFrame(c.node_id, protocol.encode(c.cancel_message())) for c in cancels]
    if frames:
        announce(CommandsDispatched(tuple(frames)))
