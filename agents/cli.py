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
import asyncio
import json
import logging
import signal
import socket
import sys
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import msgspec

from agents import __version__
from agents.agent import DEFAULT_INTERVAL_S, Agent
from agents.buffer import TelemetryBuffer
from agents.collectors.base import Collector
from agents.config import (
    AgentConfig,
    ConfigError,
    default_config_path,
    default_state_dir,
    load_config,
    normalized_server_url,
    refuse_to_overwrite,
    save_config,
    websocket_url,
)
from agents.durable import write_private_file
from agents.enrollment import Enrollment, EnrollmentFailed, enroll
from agents.spool import spool_summary

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
EXIT_REFUSED: Final = 3
EXIT_UNREACHABLE: Final = 4
EXIT_CONFIG: Final = 5
PROFILES: Final = ("h100", "h200", "b200")

log = logging.getLogger("cp-agent")


class CommandFailed(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
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
    enrollment = _enroll_or_fail(args.server, args.token, hostname, simulated=False)
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


def _enroll_or_fail(server: str, token: str, hostname: str, *, simulated: bool) -> Enrollment:
    try:
        return enroll(server, token, hostname, simulated=simulated)
    except EnrollmentFailed as exc:
        if exc.refused:
            raise CommandFailed(f"the control plane refused to enroll {hostname}: {exc}", EXIT_REFUSED) from exc
        raise CommandFailed(f"enrolling {hostname} failed: {exc}", EXIT_UNREACHABLE) from exc


# run --------------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config or default_config_path())
    state_dir = Path(args.state_dir or config.state_dir or default_state_dir())
    collector = _collector(args, config.hostname)
    agent = Agent(
        collector,
        TelemetryBuffer(state_dir, label=config.hostname),
        server_url=config.server_ws_url,
        credential=config.credential,
        hostname=config.hostname,
        interval=args.interval or config.interval_s or DEFAULT_INTERVAL_S,
        follow_server_interval=args.interval is None and config.interval_s is None,
    )
    _run_until_signalled(agent.run)
    return EXIT_OK


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


def _run_until_signalled(main: Any) -> None:
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


# simulate ---------------------------------------------------------------------------------------


class SimulatedNodeCredential(msgspec.Struct):
    hostname: str
    node_id: int
    credential: str


class FleetCredentials(msgspec.Struct):
    server_ws_url: str
    nodes: list[SimulatedNodeCredential] = []


def cmd_simulate(args: argparse.Namespace) -> int:
    if not args.enroll_token and not args.credentials_file:
        raise CommandFailed("give --enroll-token to enroll the nodes, or --credentials-file with theirs", EXIT_USAGE)
    from agents.gc_tuning import freeze_startup_objects
    from agents.simulator.fleet import run_fleet, simulated_collector_factory

    try:
        factory = simulated_collector_factory()
    except ImportError as exc:
        raise CommandFailed(str(exc), EXIT_FAILURE) from exc
    credentials = _fleet_credentials(args)
    nodes = [(node.hostname, node.credential) for node in credentials.nodes[: args.nodes]]

    async def fleet(stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        if args.duration:
            loop.call_later(args.duration, stop.set)
        # Runs at run_fleet's first await, when every node's agent and state exist: they live as long
        # as the process, and N nodes' worth of them made each full collection a pause for all.
        loop.call_soon(freeze_startup_objects)
        await run_fleet(
            credentials.server_ws_url,
            nodes,
            args.profile,
            args.seed,
            args.faults,
            stop=stop,
            interval=args.interval or DEFAULT_INTERVAL_S,
            follow_server_interval=args.interval is None,
            collector_factory=factory,
        )

    _run_until_signalled(fleet)
    return EXIT_OK


def _fleet_credentials(args: argparse.Namespace) -> FleetCredentials:
    """The fleet's credentials, in order.

    With ``--enroll-token``: PREFIX0001..PREFIXN, from the file, enrolling those missing. Without it
    the fleet is the first ``--nodes`` of the nodes the file lists, whatever their names (a control
    plane may have issued them server-side, as the demo does)."""
    known = FleetCredentials(server_ws_url=websocket_url(args.server))
    path: Path | None = args.credentials_file
    if path is not None and path.exists():
        try:
            known = msgspec.json.decode(path.read_bytes(), type=FleetCredentials)
        except (OSError, msgspec.DecodeError) as exc:
            raise ConfigError(f"cannot read the fleet credentials {path}: {exc}") from exc
    if not args.enroll_token:
        if len(known.nodes) < args.nodes:
            raise ConfigError(
                f"{path} holds {len(known.nodes)} node(s), fewer than the {args.nodes} asked for; "
                "ask for fewer with --nodes, or give --enroll-token to enroll more"
            )
        known.nodes = known.nodes[: args.nodes]
        return known
    wanted = [f"{args.hostname_prefix}{i:04d}" for i in range(1, args.nodes + 1)]
    have = {node.hostname for node in known.nodes}
    missing = [hostname for hostname in wanted if hostname not in have]
    if missing:
        failure = _enroll_fleet(args.server, args.enroll_token, missing, known)
        if path is not None:  # keep those that did enroll: a rerun must not need tokens for them again
            write_private_file(path, msgspec.json.format(msgspec.json.encode(known), indent=2) + b"\n")
        if failure is not None:
            enrolled = sum(node.hostname in wanted for node in known.nodes)
            raise CommandFailed(
                f"{failure} ({enrolled} of {args.nodes} nodes enrolled; the enrollment token must allow "
                f"{args.nodes} uses to enroll the whole fleet)",
                failure.exit_code,
            )
    order = {hostname: i for i, hostname in enumerate(wanted)}
    known.nodes = sorted((n for n in known.nodes if n.hostname in order), key=lambda n: order[n.hostname])
    return known


def _enroll_fleet(server: str, token: str, hostnames: list[str], into: FleetCredentials) -> CommandFailed | None:
    """Enroll ``hostnames`` (eight at a time) into ``into``; the first failure, if any."""
    log.info("enrolling %d simulated node(s) with %s", len(hostnames), server)
    failure = None
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(_enroll_or_fail, server, token, hostname, simulated=True) for hostname in hostnames]
        for future in futures:
            try:
                enrolled = future.result()
            except CommandFailed as exc:
                failure = failure or exc
                continue
            into.server_ws_url = enrolled.server_ws_url or into.server_ws_url
            into.nodes.append(SimulatedNodeCredential(enrolled.hostname, enrolled.node_id, enrolled.credential))
    return failure


# Command line -----------------------------------------------------------------------------------


def _server_url(text: str) -> str:
    try:
        return normalized_server_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive(kind: type) -> Any:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} must be above zero")
        return value

    return parse


def _hostname(text: str) -> str:
    from agents.protocol import Hostname

    try:
        return msgspec.convert(text, Hostname)
    except msgspec.ValidationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid hostname (letters, digits, '.', '-')") from None


def _interval(text: str) -> float:
    value = _positive(float)(text)
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} is outside 0.1 .. 3600 seconds")
    return value


def _parser() -> argparse.ArgumentParser:
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
    enroll_cmd.add_argument("--server", required=True, type=_server_url, help="the control plane, https://...")
    enroll_cmd.add_argument("--token", required=True, help="the one-time enrollment token an admin created")
    enroll_cmd.add_argument("--hostname", type=_hostname, default=None, help="default: this host's name")
    enroll_cmd.add_argument("--config", type=Path, help=config_help)
    enroll_cmd.add_argument("--state-dir", type=Path, help="the buffer's directory (default: /var/lib/cp-agent)")
    enroll_cmd.add_argument("--force", action="store_true", help="replace an existing config (re-enroll)")

    run_cmd = command("run", cmd_run, "Run the agent until SIGTERM (what the systemd unit does).")
    run_cmd.add_argument("--config", type=Path, help=config_help)
    run_cmd.add_argument("--state-dir", type=Path, help="the buffer's directory (default: the config's)")
    run_cmd.add_argument(
        "--interval", type=_interval, help="sample every S seconds, whatever the control plane asks (default: its)"
    )
    run_cmd.add_argument("--simulated", choices=PROFILES, metavar="PROFILE", help=f"simulated GPUs: {PROFILES}")
    run_cmd.add_argument("--seed", type=int, default=1, help="with --simulated: the model's seed")
    run_cmd.add_argument("--faults", help="with --simulated: the faults to script (the simulator's SPEC)")

    status_cmd = command("status", cmd_status, "Show this node's enrollment and what its buffer holds on disk.")
    status_cmd.add_argument("--config", type=Path, help=config_help)
    status_cmd.add_argument("--state-dir", type=Path, help="the buffer's directory (default: the config's)")
    status_cmd.add_argument("--json", action="store_true", help="print JSON")

    sim = command("simulate", cmd_simulate, "Run a fleet of simulated nodes, each a real agent, in this process.")
    sim.add_argument("--server", required=True, type=_server_url, help="the control plane, http(s)://...")
    sim.add_argument("--nodes", type=_positive(int), default=16, help="how many nodes (default 16)")
    sim.add_argument("--enroll-token", help="an enrollment token good for --nodes enrollments")
    sim.add_argument("--credentials-file", type=Path, help="the nodes' credentials: read, and written after enrolling")
    sim.add_argument("--profile", choices=PROFILES, default="h100", help="the GPU model (default h100)")
    sim.add_argument("--seed", type=int, default=1, help="the simulation's seed (default 1)")
    sim.add_argument("--faults", help="the faults to script (the simulator's SPEC; default: none)")
    sim.add_argument(
        "--interval", type=_interval, help="sample every S seconds, whatever the control plane asks (default: its)"
    )
    sim.add_argument("--duration", type=_positive(float), help="stop after S seconds (default: at a signal)")
    sim.add_argument(
        "--hostname-prefix", default="sim-", help="with --enroll-token: nodes are named PREFIX0001.. (default sim-)"
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
