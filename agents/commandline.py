"""What the ``cp-agent`` subcommands share: exit codes, the failure that carries one, argument types,
enrolling a node, and running the agent's event loop until a signal.

The commands are ``agents.cli`` (enroll, run, status) and ``agents.simulator.cli`` (simulate).
"""

import argparse
import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final

from agents.config import MAX_SEND_INTERVAL_S, normalized_server_url
from agents.enrollment import Enrollment, EnrollmentFailed, enroll

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_REFUSED: Final = 3
EXIT_UNREACHABLE: Final = 4
EXIT_CONFIG: Final = 5
PROFILES: Final = ("h100", "h200", "b200")  # the simulated GPU models a node can be
SEND_INTERVAL_HELP: Final = (
    "send telemetry at most every S seconds, the samples taken meanwhile in one frame; events go at once "
    "(0: each sample as soon as it is taken)"
)


class CommandFailed(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def enroll_or_fail(server: str, token: str, hostname: str, *, simulated: bool) -> Enrollment:
    try:
        return enroll(server, token, hostname, simulated=simulated)
    except EnrollmentFailed as exc:
        if exc.refused:
            raise CommandFailed(f"the control plane refused to enroll {hostname}: {exc}", EXIT_REFUSED) from exc
        raise CommandFailed(f"enrolling {hostname} failed: {exc}", EXIT_UNREACHABLE) from exc


def run_until_signalled(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``main(stop)`` on one event loop (uvloop when installed) until SIGTERM or SIGINT sets stop."""

    async def supervised() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await main(stop)

    _event_loop_run(supervised())


def _event_loop_run(coroutine: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(coroutine)
    else:
        uvloop.run(coroutine)


# Argument types ---------------------------------------------------------------------------------


def server_url(text: str) -> str:
    try:
        return normalized_server_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def positive(kind: type) -> Any:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} must be above zero")
        return value

    return parse


def interval(text: str) -> float:
    value = positive(float)(text)
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} is outside 0.1 .. 3600 seconds")
    return value


def send_interval(text: str) -> float:
    """Seconds between telemetry sends: 0 (each sample at once) up to ``MAX_SEND_INTERVAL_S``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= MAX_SEND_INTERVAL_S:  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"{text} is outside 0 .. {MAX_SEND_INTERVAL_S:g} seconds (0: send each sample as soon as it is taken)"
        )
    return value
