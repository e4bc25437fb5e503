"""``python -m agents.executors CHECK [--params JSON | --params-file PATH]``: run one check.

stdout carries only protocol lines (progress and log while it runs, one result at the end; see
``agents.protocol``); everything else, libraries' chatter included, goes to stderr. The result is
always written, also when the parameters are wrong, torch is missing, the check breaks or SIGTERM
stops it (then with the measurements made so far). Exit codes: 0 passed or not judged (or skipped),
1 failed, 2 bad command line or parameters, 3 could not run or finish (the result's error says why).
"""

import argparse
import logging
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.executors.checks import CHECKS
from agents.executors.context import CheckContext
from agents.executors.params import ParamsError, decode_params
from agents.executors.reporter import Reporter, claim_stdout
from agents.executors.results import ResultBuilder
from agents.executors.runtime import CheckSkipped, CheckUnavailable, Interrupted, interruptible, prefer_pci_order
from agents.executors.summary import summary_lines
from agents.protocol import CheckResult

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3


def main(argv: list[str] | None = None) -> int:
    checks = "\n".join(f"  {name:<17} {check.summary}" for name, check in sorted(CHECKS.items()))
    parser = argparse.ArgumentParser(
        prog="python -m agents.executors",
        description="Run one burn-in check; its progress and result go to stdout as protocol lines.",
        epilog=f"checks:\n{checks}\n\nParameters and formulas: docs/burn-in-checks.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("check", choices=sorted(CHECKS))
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--params", help="the check's parameters, a JSON object")
    source.add_argument("--params-file", type=Path, help="a file holding them")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    prefer_pci_order()
    reporter = Reporter(CHECKS[args.check].name, claim_stdout())
    result, code = run(args.check, args.params_file or args.params, reporter)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the check is over: a request to stop changes nothing now
    for line in summary_lines(result):
        reporter.log(line.level, line.message)
    reporter.result(result)
    return code


def run(
    name: str,
    raw_params: Path | str | None,
    reporter: Reporter,
    clock: Callable[[], float] = time.time,
    **facilities: Any,
) -> tuple[CheckResult, int]:
    """Run check ``name`` in this process and return its result and exit code. ``raw_params`` is
    JSON text, a file holding it, or None for the defaults; ``clock`` stamps the result and the
    samples; ``facilities`` replace the context's (``open_collector``, ``which``)."""
    check = CHECKS[name]
    builder = ResultBuilder(check.name, clock)
    try:
        params = decode_params(check.params, _read(raw_params))
    except (ParamsError, OSError) as error:
        return builder.finish(error=str(error)), EXIT_USAGE
    context = CheckContext(reporter, builder, **facilities)
    try:
        with interruptible():
            check.run(params, context)
    except Interrupted as signalled:
        elapsed = builder.clock() - builder.started
        return builder.finish(error=f"interrupted by {signalled} after {elapsed:.1f} s"), EXIT_ERROR
    except CheckSkipped as skipped:
        return builder.finish(skipped=str(skipped)), EXIT_PASSED
    except CheckUnavailable as error:
        return builder.finish(error=str(error)), EXIT_ERROR
    except Exception as error:  # the result must still go out, with what broke
        traceback.print_exc(file=sys.stderr)
        return builder.finish(error=f"{type(error).__name__}: {error}"), EXIT_ERROR
    result = builder.finish()
    return result, EXIT_FAILED if result.passed is False else EXIT_PASSED


def _read(raw_params: Path | str | None) -> bytes | str | None:
    return raw_params.read_bytes() if isinstance(raw_params, Path) else raw_params


if __name__ == "__main__":
    sys.exit(main())
