"""Judging a node's burn-in on the server, check by check: the check's own verdicts (a mismatch, a drop
over the run, a counter above 0) and the node type's thresholds together, so one run can hold nodes of
several types and every verdict names the threshold version it used. Pure functions of the rows.

A check fails when its command did not succeed for want of running (expired, cancelled, could not
run), when any figure failed on the node, or when a figure is below (or above) its rule. A skipped
check (``dcgm_diag`` where DCGM is not installed) is not judged; neither is a figure no rule names.
A GPU node type's check that ran on the CPU fails: its figures are not the GPUs'.
"""

from dataclasses import dataclass, field
from typing import Any, Final

from apps.jobs.choices import CommandState
from apps.jobs.models import Command

MAX_REASONS: Final = 8


@dataclass
class CheckVerdict:
    passed: bool | None
    reasons: list[str] = field(default_factory=list)
    judged: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> str:
        if self.passed is None:
            return self.reasons[0] if self.reasons else "nothing judged"
        if self.passed:
            return f"passed ({len(self.judged)} figures judged)"
        more = len(self.reasons) - MAX_REASONS
        return "; ".join(self.reasons[:MAX_REASONS]) + (f"; and {more} more" if more > 0 else "")


def meets(measured: float, value: float, bound: str) -> bool:
    return measured >= value if bound == "at_least" else measured <= value


def judge_command(command: Command, rules: dict[tuple[str, str], dict[str, Any]], *, gpu_node: bool) -> CheckVerdict:
    """The verdict of one step on one node (``rules`` from ``ThresholdVersion.rules_by_measurement``)."""
    result = command.result
    if command.state in (CommandState.EXPIRED, CommandState.CANCELLED) or result is None:
        return CheckVerdict(False, [command.reason or f"it ended {command.state} without a result"])
    if result.get("error"):
        return CheckVerdict(False, [f"could not run: {result['error']}"])
    if result.get("skipped"):
        return CheckVerdict(None, [f"skipped: {result['skipped']}"])
    if gpu_node and result.get("device") == "cpu":
        return CheckVerdict(False, [f"ran on the CPU ({result.get('device_name', '')}), not on the node's GPUs"])
    verdict = CheckVerdict(None)
    for figure in result.get("measurements", []):
        _judge_figure(command.check_name, figure, rules, verdict)
    if verdict.passed is None and result.get("passed") is False:  # failed on the node, with no figure to say why
        verdict.passed, verdict.reasons = False, [command.reason or "the check failed on the node"]
    return verdict


def _judge_figure(check: str, figure: dict[str, Any], rules: dict, verdict: CheckVerdict) -> None:
    where = _where(figure)
    rule = rules.get((check, figure["name"]))
    own = figure.get("passed")
    judged: dict[str, Any] = {
        "name": figure["name"],
        "gpu": figure.get("gpu"),
        "peer": figure.get("peer"),
        "port": figure.get("port"),
        "measured": figure["measured"],
        "unit": figure["unit"],
        "on_node": own,
    }
    if rule is not None:
        size = (figure.get("evidence") or {}).get("size_bytes")
        at = rule.get("at_size_bytes")
        if at is not None and (size is None or size < at):
            verdict.reasons.append(
                f"{figure['name']}{where} not judged: measured at {size} bytes, the rule is for {at} and up"
            )
        else:
            passed = meets(figure["measured"], rule["value"], rule["bound"])
            judged.update(expected=rule["value"], bound=rule["bound"], passed=passed)
            if not passed:
                _fail(verdict, figure, where, rule["value"], rule["bound"])
            elif verdict.passed is None:
                verdict.passed = True
    if own is not None:
        judged.setdefault("passed", own)
        if own is False and judged["passed"] is not False:  # failed on the node, by the check's own rule
            judged["passed"] = False
            _fail(verdict, figure, where, figure.get("expected"), figure.get("bound", "at_least"))
        elif own and verdict.passed is None:
            verdict.passed = True
    if "passed" in judged:
        verdict.judged.append(judged)


def _fail(verdict: CheckVerdict, figure: dict[str, Any], where: str, value: float | None, bound: str) -> None:
    verdict.passed = False
    unit = figure["unit"]
    if value is None:  # a tool's own verdict (gpu-burn's FAULTY, a dcgmi test)
        verdict.reasons.append(f"{figure['name']}{where} failed")
        return
    sign = "<" if bound == "at_least" else ">"
    verdict.reasons.append(f"{figure['name']}{where} {figure['measured']:g} {sign} {value:g} {unit}")


def _where(figure: dict[str, Any]) -> str:
    if figure.get("peer") is not None:
        return f" GPU {figure['gpu']}→{figure['peer']}"
    if figure.get("gpu") is not None:
        return f" on GPU {figure['gpu']}"
    if figure.get("port"):
        return f" on {figure['port']}"
    return ""


def node_reason(checks: list[tuple[str, CheckVerdict]]) -> str:
    """The failed checks and what failed in each, for the quarantine's reason."""
    failed = [f"{name}: {verdict.summary}" for name, verdict in checks if verdict.passed is False]
    return " | ".join(failed)
