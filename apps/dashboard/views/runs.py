"""The runs pages: every run, newest first, with its progress, and one run with a progress bar per node
and its current step, each node's results check by check, the run's log lines, and cancel (of the run
or of one node's command) for operators, through the REST API (apps/jobs/api), which checks the role again.

Both pages are kept live by runs.js: ``ws/live``'s runs feed (apps/dashboard/publish.py) says that a run
changed, and the page fetches its own markup again with ``?partial=1`` (as the failures page does), so
that a run's markup lives in one template and every value in it is escaped by the template engine.
Each page reads the database in a fixed number of queries, whatever the number of runs, nodes or steps.
"""

from dataclasses import dataclass, field
from typing import Any, Final

from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.http import Http404

from apps.accounts.roles import Role
from apps.burnin.choices import NodeState
from apps.burnin.models import BurnIn, BurnInCheck, BurnInNode
from apps.dashboard.siblings import attach_figures
from apps.dashboard.streams import run_percent
from apps.dashboard.views.base import DashboardPage
from apps.dashboard.views.burnins import burn_in_form
from apps.dashboard.views.failures import bounded_int
from apps.jobs.choices import COMMAND_ACTIVE, COMMAND_FINAL, RunState
from apps.jobs.models import Command, CommandLogLine, Run

PAGE_SIZE: Final = 50
LOG_LINES: Final = 200  # the newest, on the run page
RUNNING_JOBS: Final = 5  # on the fleet page


def command_progress(command: Command) -> float:
    if command.state in COMMAND_FINAL:
        return 1.0
    if command.state in COMMAND_ACTIVE:
        return command.fraction or 0.0
    return 0.0


@dataclass
class NodeRow:
    """One node of a run: its commands in step order, how far it is, and what it is doing now."""

    node_id: int
    hostname: str
    commands: list[Command] = field(default_factory=list)
    burn_in: BurnInNode | None = None  # a burn-in's verdict on the node, judged against its thresholds

    @property
    def percent(self) -> int:
        return round(100 * sum(map(command_progress, self.commands)) / len(self.commands))

    @property
    def current(self) -> Command | None:
        """The command the node is on: the first not over."""
        return next((command for command in self.commands if not command.is_final), None)

    @property
    def state(self) -> str:
        """Its worst end (failed, expired, cancelled), or where it is."""
        states = {command.state for command in self.commands}
        for state in ("failed", "expired", "cancelled", "running", "sent", "pending"):
            if state in states:
                return state
        return "succeeded"


def node_rows(commands: list[Command], verdicts: dict[int, BurnInNode] | None = None) -> list[NodeRow]:
    """``commands`` (ordered by node and step) grouped by node, in the order they came, each node with
    its burn-in verdict from ``verdicts`` (by node id) when the run is a burn-in's."""
    rows: dict[int, NodeRow] = {}
    for command in commands:
        row = rows.setdefault(command.node_id, NodeRow(command.node_id, command.node.hostname))
        row.commands.append(command)
    for row in rows.values():
        row.burn_in = (verdicts or {}).get(row.node_id)
    return list(rows.values())


def burn_in_verdicts(run: Run, commands: list[Command]) -> dict[int, BurnInNode]:
    """A burn-in run's verdicts by node id, and each judged command's ``judged`` check (two queries).

    A check's own "pass" only says that the node saw nothing wrong by its own measure; the burn-in
    judges every figure against the node type's thresholds on the server, and that verdict (which a
    straggler fails although its check ran cleanly) is the one that moved the node."""
    judged = {check.command_id: check for check in BurnInCheck.objects.filter(command__run=run)}
    for command in commands:
        command.judged = judged.get(command.pk)
    nodes = BurnInNode.objects.filter(burn_in__run=run).select_related("thresholds__node_type")
    return {row.node_id: row for row in nodes}


def burn_in_failures() -> Subquery:
    """A run's nodes that failed its burn-in against their thresholds: a burn-in whose every command
    ran cleanly (so the run succeeded, 0 commands failed) can still have quarantined a straggler."""
    failed = BurnInNode.objects.filter(burn_in__run=OuterRef("pk"), state=NodeState.FAILED).order_by()
    return Subquery(failed.values("burn_in").annotate(n=Count("pk")).values("n"), output_field=IntegerField())


def running_runs() -> list[Run]:
    """The newest runs still going, with their progress, for the fleet page's running jobs: one query."""
    runs = list(Run.objects.with_counts().filter(state=RunState.RUNNING).order_by("-created_at", "-id")[:RUNNING_JOBS])
    for run in runs:
        run.percent = run_percent(run)
    return runs


class RunsPage(DashboardPage):
    nav = "runs"
    template_name = "dashboard/runs.html"

    def get_template_names(self) -> list[str]:
        return ["dashboard/_run_list.html" if "partial" in self.request.GET else self.template_name]

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        state = self.request.GET.get("state", "")
        limit = bounded_int(self.request.GET.get("limit"), PAGE_SIZE, 1, 500)
        runs = Run.objects.with_counts().annotate(burn_in_failed=burn_in_failures()).order_by("-created_at", "-id")
        error = ""
        if state and state not in RunState.values:
            error = f"Unknown state “{state}”: choose one of {', '.join(RunState.values)}."
        elif state:
            runs = runs.filter(state=state)
        rows = list(runs[: limit + 1])
        for run in rows:
            run.percent = run_percent(run)
        operator = self.request.user.has_role(Role.OPERATOR)
        return super().get_context_data(**kwargs) | {
            "burn_in_form": burn_in_form(pick_nodes=True) if operator and "partial" not in self.request.GET else None,
            "runs": rows[:limit],
            "has_more": len(rows) > limit,
            "state": state,
            "state_error": error,
            "state_choices": RunState.choices,
        }


class RunPage(DashboardPage):
    nav = "runs"
    template_name = "dashboard/run.html"

    def get_template_names(self) -> list[str]:
        return ["dashboard/_run_detail.html" if "partial" in self.request.GET else self.template_name]

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        run = Run.objects.with_counts().filter(pk=kwargs["pk"]).first()
        if run is None:
            raise Http404("No such run.")
        run.percent = run_percent(run)
        commands = list(run.commands.select_related("node").order_by("node__hostname", "node_id", "sequence"))
        attach_figures(commands)
        burn_in = BurnIn.objects.with_counts().filter(run=run).first()
        verdicts = burn_in_verdicts(run, commands) if burn_in is not None else {}
        lines = list(
            CommandLogLine.objects.filter(command__run=run).select_related("command__node").order_by("-pk")[:LOG_LINES]
        )
        return super().get_context_data(**kwargs) | {
            "run": run,
            "steps": [step["check"] for step in run.steps],
            "nodes": node_rows(commands, verdicts),
            "burn_in": burn_in,
            "log_lines": lines[::-1],
            "last_log_id": lines[0].pk if lines else 0,
        }
