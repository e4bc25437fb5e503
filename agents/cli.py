"""``cp-agent``: enroll a GPU node, run its agent, show its state, or run a simulated fleet.

Exit codes:
  0  success (``run`` and ``simulate``: stopped by SIGTERM or SIGINT)
  1  unexpected failure, or no access to the GPUs (NVML)
  2  bad command line
  3  the control plane refused the enrollment (HTTP 4xx: a bad, used, expired or revoked token,
     a hostname it will not take); the server's message is printed
  4  the control plane could not be reached or answered badly (network error, HTTP 5xx)
  5  configuration problem: the config file is missing, unreadable or invalid, or it already
     exists and ``enroll`` was not given ``--force``
"""

import argparse
import json
import logging
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

import msgspec

from agents import __version__
from agents.agent import DEFAULT_INTERVAL_S, Agent
from agents.buffer import TelemetryBuffer
from agents.collectors.base import Collector
from agents.commandline import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_OK,
    PROFILES,
    SEND_INTERVAL_HELP,
    CommandFailed,
    enroll_or_fail,
    interval,
    run_until_signalled,
    send_interval,
    server_url,
)
from agents.commands.executor import CommandExecutor
from agents.commands.runner import Runner, SubprocessRunner
from agents.commands.store import CommandStore
from agents.config import (
    AgentConfig,
    ConfigError,
    default_config_path,
    default_state_dir,
    load_config,
    refuse_to_overwrite,
    save_config,
    websocket_url,
)
from agents.simulator import cli as simulator_cli
from agents.spool import spool_summary


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.command(args)
    except CommandFailed as exc:
        print(f"cp-agent {args.command_name}: {exc}", file=sys.stderr)
        return exc.exit_code
    except ConfigError as exc:
        print(f"cp-agent {args.command_name}: {exc}", file=sys.stderr)
        return EXIT_CONFIG


# enroll -----------------------------------------------------------------------------------------


def cmd_enroll(args: argparse.Namespace) -> int:
    path = args.config or default_config_path()
    refuse_to_overwrite(path, force=args.force)
    hostname = args.hostname or _hostname(socket.gethostname())
    enrollment = enroll_or_fail(args.server, args.token, hostname, simulated=False)
    config = AgentConfig(
        server_url=args.server,
        server_ws_url=enrollment.server_ws_url or websocket_url(args.server),
        node_id=enrollment.node_id,
        hostname=enrollment.hostname,
        credential=enrollment.credential,
        state_dir=str(args.state_dir or default_state_dir()),
    )
    save_config(config, path, force=args.force)
    print(f"Enrolled {enrollment.hostname} as node {enrollment.node_id} of {args.server}.")
    print(f"Credential written to {path} (mode 0600). Start the agent: systemctl enable --now cp-agent")
    return EXIT_OK


# run --------------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config or default_config_path())
    state_dir = Path(args.state_dir or config.state_dir or default_state_dir())
    collector = _collector(args, config.hostname)
    commands = CommandExecutor(
        CommandStore(state_dir / "commands"), _runner(args, collector), label=config.hostname
    )  # every key it ran, kept on disk: none runs twice, not even across a restart
    agent = Agent(
        collector,
        TelemetryBuffer(state_dir, label=config.hostname),
        server_url=config.server_ws_url,
        credential=config.credential,
        hostname=config.hostname,
        interval=args.interval or config.interval_s or DEFAULT_INTERVAL_S,
        send_interval=config.send_interval_s if args.send_interval is None else args.send_interval,
        follow_server_interval=args.interval is None and config.interval_s is None,
        commands=commands,
    )
    run_until_signalled(agent.run)
    return EXIT_OK


def _runner(args: argparse.Namespace, collector: Collector) -> Runner:
    """Checks as processes (``--check-program``, or this Python's ``-m agents.executors``); on a simulated
    node without ``--check-program``, computed from its model."""
    if args.check_program:
        return SubprocessRunner(shlex.split(args.check_program))
    if args.simulated:
        from agents.simulator.commands import SimulatedRunner

        return SimulatedRunner(collector)  # type: ignore[arg-type]  (the simulator's collector)
    return SubprocessRunner()


def _collector(args: argparse.Namespace, hostname: str) -> Collector:
    if args.simulated:
        from agents.simulator.fleet import simulated_collector_factory

        try:
            factory = simulated_collector_factory()
        except ImportError as exc:
            raise CommandFailed(str(exc), EXIT_FAILURE) from exc
        return factory(args.simulated, hostname, args.seed, args.faults)
    try:
        from agents.collectors.host import NodeCollector
        from agents.collectors.nvml import NvmlUnavailable
    except ImportError as exc:
        raise CommandFailed(f"the NVML collector is not available: {exc}", EXIT_FAILURE) from exc
    try:
        return NodeCollector.open(hostname)
    except NvmlUnavailable as exc:
        raise CommandFailed(f"{exc} (run with --simulated PROFILE for a simulated node)", EXIT_FAILURE) from exc


# status -----------------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    path = args.config or default_config_path()
    config = load_config(path)
    state_dir = Path(args.state_dir or config.state_dir)
    spool = spool_summary(state_dir)
    if args.json:
        report = {
            "node_id": config.node_id,
            "hostname": config.hostname,
            "server_url": config.server_url,
            "server_ws_url": config.server_ws_url,
            "config": str(path),
            "state_dir": str(state_dir),
            "buffer": spool,
        }
        print(json.dumps(report, indent=2))
        return EXIT_OK
    telemetry, events = spool["telemetry"], spool["events"]
    print(f"node:      {config.hostname} (node {config.node_id})")
    print(f"server:    {config.server_url} (agent socket {config.server_ws_url})")
    print(f"config:    {path}")
    print(f"state dir: {state_dir}")
    print(
        f"buffer:    {telemetry['spooled_items']} sample(s) and {events['spooled_items']} event(s) spooled on disk "
        f"({(telemetry['spooled_bytes'] + events['spooled_bytes']) / 1e6:.1f} MB); "
        f"acknowledged up to seq {telemetry['acked_seq']}; {telemetry['dropped']} sample(s) dropped ever"
    )
    print("           (a running agent also holds up to 10 minutes of samples in memory)")
    return EXIT_OK


# Command line -----------------------------------------------------------------------------------


def _hostname(text: str) -> str:
    from agents.protocol import Hostname

    try:
        return msgspec.convert(text, Hostname)
    except msgspec.ValidationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid hostname (letters, digits, '.', '-')") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cp-agent",
        description="The GPU control plane's node agent: reports a node's GPUs, network ports and telemetry.",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cp-agent {__version__}")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    def command(name: str, handler: Any, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(command=handler, command_name=name)
        return sub

    config_help = "the agent's config file (default: $CP_AGENT_CONFIG, or /etc/cp-agent/agent.json)"
    enroll_cmd = command("enroll", cmd_enroll, "Exchange an enrollment token for this node's credential.")
    enroll_cmd.add_argument("--server", required=True, type=server_url, help="the control plane, https://...")
    enroll_cmd.add_argument("--token", required=True, help="the one-time enrollment token an admin created")
    enroll_cmd.add_argument("--hostname", type=_hostname, default=None, help="default: this host's name")
    enroll_cmd.add_argument("--config", type=Path, help=config_help)
    enroll_cmd.add_argument("--state-dir", type=Path, help="the buffer's directory (default: /var/lib/cp-agent)")
    enroll_cmd.add_argument("--force", action="store_true", help="replace an existing config (re-enroll)")

    run_cmd = command("run", cmd_run, "Run the agent until SIGTERM (what the systemd unit does).")
    run_cmd.add_argument("--config", type=Path, help=config_help)
    run_cmd.add_argument("--state-dir", type=Path, help="the buffer's directory (default: the config's)")
    run_cmd.add_argument(
        "--interval", type=interval, help="sample every S seconds, whatever the control plane asks (default: its)"
    )
    run_cmd.add_argument("--send-interval", type=send_interval, metavar="S", help=SEND_INTERVAL_HELP)
    run_cmd.add_argument("--simulated", choices=PROFILES, metavar="PROFILE", help=f"simulated GPUs: {PROFILES}")
    run_cmd.add_argument("--seed", type=int, default=1, help="with --simulated: the model's seed")
    run_cmd.add_argument("--faults", help="with --simulated: the faults to script (the simulator's SPEC)")
    run_cmd.add_argument(
        "--check-program",
        help="run each check as PROGRAM CHECK --params JSON (default: python -m agents.executors; "
        "with --simulated, the simulator's model)",
    )

    status_cmd = command("status", cmd_status, "Show this node's enrollment and what its buffer holds on disk.")
    status_cmd.add_argument("--config", type=Path, help=config_help)
    status_cmd.add_argument("--state-dir", type=Path, help="the buffer's directory (default: the config's)")
    status_cmd.add_argument("--json", action="store_true", help="print JSON")

    simulator_cli.add_command(command)
    return parser


if __name__ == "__main__":
    sys.exit(main())
