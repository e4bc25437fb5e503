"""What a check's log says when it ends: the outcome in one line, then each figure that failed, so that a
run's log (the run page, ``cpctl runs logs``) reads as the story of the run without opening every
result. Real checks and simulated ones end with the same lines (agents/executors/__main__.py,
agents/simulator/commands.py); the server keeps them as any other log line."""

from typing import Final

from agents.protocol import CheckLog, CheckMeasurement, CheckResult, LogLevel

FAILED_FIGURES_LOGGED: Final = 10  # one line each; the rest are counted in one more line


def figure_label(figure: CheckMeasurement) -> str:
    """``tflops_bf16 GPU 3``, ``p2p_gbps GPU 0↔5``, ``symbol_errors mlx5_0/1``."""
    where = ""
    if figure.gpu is not None:
        where = f" GPU {figure.gpu}" + (f"↔{figure.peer}" if figure.peer is not None else "")
    if figure.port:
        where += f" {figure.port}"
    return figure.name + where


def failed_figure_line(figure: CheckMeasurement) -> str:
    """``tflops_bf16 GPU 3: 688.5 TFLOP/s, expected ≥ 720``."""
    text = f"{figure_label(figure)}: {figure.measured:g} {figure.unit}"
    if figure.expected is not None:
        text += f", expected {'≥' if figure.bound == 'at_least' else '≤'} {figure.expected:g}"
    return text


def outcome_line(result: CheckResult) -> tuple[LogLevel, str]:
    where = f"on {result.device_name} ({result.tool})"
    count = len(result.measurements)
    figures = f"{count} figure{'' if count == 1 else 's'}"
    if result.error is not None:
        return "error", f"could not finish {where}: {result.error}"
    if result.skipped is not None:
        return "info", f"skipped {where}: {result.skipped}"
    if result.passed is False:
        failed = sum(1 for figure in result.measurements if figure.passed is False)
        return "warning", f"failed {where}: {failed} of {figures} out of bounds"
    unbounded = sum(1 for figure in result.measurements if figure.passed is None)
    if result.passed and not unbounded:
        return "info", f"passed {where}: {figures}, all within bounds"
    if result.passed:
        # Not "all within bounds": the control plane may yet fail the figures the node had no bound
        # for (a straggler's TFLOP/s against its node type's threshold), and did, under a "passed".
        return "info", (
            f"finished {where}: {figures}, {count - unbounded} within the node's own bounds, "
            f"{unbounded} judged by the control plane against its thresholds"
        )
    return "info", f"finished {where}: {figures}, judged by the control plane against its thresholds"


def summary_lines(result: CheckResult) -> list[CheckLog]:
    """The log lines a check writes when it ends with ``result``."""
    level, message = outcome_line(result)
    lines = [CheckLog(check=result.check, level=level, message=message)]
    failed = [figure for figure in result.measurements if figure.passed is False]
    lines += [
        CheckLog(check=result.check, level="warning", message=failed_figure_line(figure))
        for figure in failed[:FAILED_FIGURES_LOGGED]
    ]
    if len(failed) > FAILED_FIGURES_LOGGED:
        more = len(failed) - FAILED_FIGURES_LOGGED
        lines.append(CheckLog(check=result.check, level="warning", message=f"and {more} more failed figures"))
    return lines
