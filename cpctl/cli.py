"""``cpctl``: the command line and its exit codes (docs/cli.md).

0: done (a run or burn-in: every node passed); 1: a run or burn-in failed; 2: the command line or the
configuration is wrong; 3: the run was cancelled, or failed only by commands that expired; 4: the API
refused the request or could not be reached; 5: ``--timeout`` passed while waiting."""

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from cpctl import __version__, commands
from cpctl.client import ApiError, Client, Config, ConfigError

Verb = Callable[[commands.Context, argparse.Namespace], int]


def positive(kind: type[float] | type[int]) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def names(text: str) -> list[str]:
    """``a,b c`` → ``["a", "b", "c"]``: hostnames or ids, separated by commas or spaces."""
    found = [name for name in text.replace(",", " ").split() if name]
    if not found:
        raise argparse.ArgumentTypeError("give at least one node")
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cpctl", description="The GPU control plane from the command line.")
    connection(parser, url=None, token=None, json=False)
    # On every verb as on cpctl itself (``cpctl nodes list --json``), where it leaves cpctl's alone if absent.
    common = argparse.ArgumentParser(add_help=False)
    connection(common, url=argparse.SUPPRESS, token=argparse.SUPPRESS, json=argparse.SUPPRESS)
    parser.add_argument("--version", action="version", version=f"cpctl {__version__}")
    groups = parser.add_subparsers(dest="group", required=True, metavar="{nodes,failures,runs,burnin}")

    def verb(group: argparse._SubParsersAction, name: str, function: Verb, help_: str) -> argparse.ArgumentParser:
        sub = group.add_parser(name, help=help_, description=help_, parents=[common])
        sub.set_defaults(verb=function)
        return sub

    def group(name: str, help_: str) -> argparse._SubParsersAction:
        sub = groups.add_parser(name, help=help_, description=help_)
        return sub.add_subparsers(dest="verb_name", required=True)

    nodes = group("nodes", "the fleet's nodes")
    listing = verb(nodes, "list", commands.nodes_list, "list nodes, by hostname")
    listing.add_argument("--cluster", help="only this cluster's (name)")
    listing.add_argument("--lifecycle", action="append", help="new, burn_in, in_service, ... (repeatable)")
    listing.add_argument("--liveness", action="append", help="online, unreachable, ... (repeatable)")
    listing.add_argument("-q", "--search", help="hostname, serial or address contains this")
    listing.add_argument("--limit", type=positive(int), help="at most this many")
    show = verb(nodes, "show", commands.nodes_show, "one node")
    show.add_argument("node", help="hostname or id")

    failures = group("failures", "failures: XIDs, ECC, thermal, links, liveness, ...")
    listing = verb(failures, "list", commands.failures_list, "list failures, newest first")
    listing.add_argument("--node", help="only this node's (hostname)")
    listing.add_argument("--state", action="append", help="open, acknowledged, resolved (repeatable)")
    listing.add_argument("--severity", action="append", help="critical, warning, info (repeatable)")
    listing.add_argument("--kind", action="append", help="xid, ecc, thermal, ... (repeatable)")
    listing.add_argument("--open", action="store_true", help="only open or acknowledged ones, side effects left out")
    listing.add_argument("--since", help="seen at or after this ISO 8601 time")
    listing.add_argument("--limit", type=positive(int), help="at most this many")

    runs = group("runs", "runs: a set of commands, one per node and step")
    show = verb(runs, "show", commands.runs_show, "a run and its commands")
    show.add_argument("run", type=positive(int), help="the run's id")
    cancel = verb(runs, "cancel", commands.runs_cancel, "cancel a run: agents stop what they run")
    cancel.add_argument("run", type=positive(int), help="the run's id")
    cancel.add_argument("--reason", default="", help="why, for the audit log")
    logs = verb(runs, "logs", commands.runs_logs, "a run's log lines")
    logs.add_argument("run", type=positive(int), help="the run's id")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the run is over")
    logs.add_argument("--poll", type=positive(float), default=2.0, help="seconds between polls (2)")
    wait = verb(runs, "wait", commands.runs_wait, "wait for a run to end; the exit code says how it ended")
    wait.add_argument("run", type=positive(int), help="the run's id")
    waiting(wait)

    burnin = group("burnin", "burn-ins: a suite of checks that decides whether nodes enter service")
    start = verb(burnin, "start", commands.burnin_start, "start a burn-in on nodes or a whole cluster")
    which = start.add_mutually_exclusive_group(required=True)
    which.add_argument("--nodes", type=names, help="hostnames or ids, comma-separated")
    which.add_argument("--cluster", help="every node of this cluster that can start one")
    start.add_argument("--suite", required=True, help="quick, standard, extended or one of your own")
    start.add_argument("--wait", action="store_true", help="wait for the verdicts; the exit code says them")
    start.add_argument("--keep-in-burn-in", dest="into_service", action="store_false",
                       help="leave nodes that pass in burn-in (new nodes always go into service)")  # fmt: skip
    start.add_argument("--deadline", type=positive(int), help="seconds from now until what is unfinished expires")
    start.add_argument("--idempotency-key", help="repeat the request with it and get the same burn-in")
    waiting(start)
    return parser


def connection(parser: argparse.ArgumentParser, **defaults: object) -> None:
    parser.add_argument("--url", default=defaults["url"], help="the control plane, http://host:port (CPCTL_URL)")
    parser.add_argument("--token", default=defaults["token"], help="an API token, cpt_... (CPCTL_TOKEN)")
    parser.add_argument("--json", action="store_true", default=defaults["json"], help="print JSON, for scripts")


def waiting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--poll", type=positive(float), default=2.0, help="seconds between polls (2)")
    parser.add_argument("--timeout", type=positive(float), help="stop waiting after this many seconds (exit 5)")


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    parser = build_parser()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) and usage errors (2, argparse's own)
        return int(exc.code or 0)
    try:
        config = Config.resolve(args.url, args.token, os.environ if env is None else env)
    except ConfigError as exc:
        err.write(f"cpctl: {exc}\n")
        return commands.USAGE
    context = commands.Context(client=Client(config), out=out, err=err, json=args.json)
    try:
        return args.verb(context, args)
    except ApiError as exc:
        err.write(f"cpctl: {exc}\n")
        return commands.API_ERROR
    except commands.WaitTimedOut as exc:
        err.write(f"cpctl: {exc}\n")
        return commands.TIMED_OUT
    except KeyboardInterrupt:
        err.write("cpctl: interrupted; whatever was started goes on on the server\n")
        return 130
