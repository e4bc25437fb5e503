"""``cp-agent simulate``: a fleet of simulated nodes, each a real agent, in this process.

The nodes' credentials come from ``--credentials-file`` (``agents.config.FleetCredentials``, the file
the demo writes too), enrolling those missing with ``--enroll-token`` and writing the file again, so a
second run needs no token.
"""

import argparse
import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agents.agent import DEFAULT_INTERVAL_S, DEFAULT_SEND_INTERVAL_S
from agents.commandline import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    PROFILES,
    SEND_INTERVAL_HELP,
    CommandFailed,
    enroll_or_fail,
    interval,
    positive,
    run_until_signalled,
    send_interval,
    server_url,
)
from agents.config import (
    ConfigError,
    FleetCredentials,
    SimulatedNodeCredential,
    load_fleet_credentials,
    save_fleet_credentials,
    websocket_url,
)
from agents.simulator import fleet

log = logging.getLogger("cp-agent")

HELP = "Run a fleet of simulated nodes, each a real agent, in this process."


def add_command(command: Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]) -> None:
    """Register ``simulate`` through ``cp-agent``'s ``command(name, handler, help)``."""
    sim = command("simulate", cmd_simulate, HELP)
    sim.add_argument("--server", required=True, type=server_url, help="the control plane, http(s)://...")
    sim.add_argument("--nodes", type=positive(int), default=16, help="how many nodes (default 16)")
    sim.add_argument("--enroll-token", help="an enrollment token good for --nodes enrollments")
    sim.add_argument("--credentials-file", type=Path, help="the nodes' credentials: read, and written after enrolling")
    sim.add_argument("--profile", choices=PROFILES, default="h100", help="the GPU model (default h100)")
    sim.add_argument("--seed", type=int, default=1, help="the simulation's seed (default 1)")
    sim.add_argument("--faults", help="the faults to script (the simulator's SPEC; default: none)")
    sim.add_argument(
        "--interval", type=interval, help="sample every S seconds, whatever the control plane asks (default: its)"
    )
    sim.add_argument(
        "--send-interval",
        type=send_interval,
        default=DEFAULT_SEND_INTERVAL_S,
        metavar="S",
        help=f"every node: {SEND_INTERVAL_HELP} (default 0)",
    )
    sim.add_argument("--duration", type=positive(float), help="stop after S seconds (default: at a signal)")
    sim.add_argument(
        "--hostname-prefix", default="sim-", help="with --enroll-token: nodes are named PREFIX0001.. (default sim-)"
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    if not args.enroll_token and not args.credentials_file:
        raise CommandFailed("give --enroll-token to enroll the nodes, or --credentials-file with theirs", EXIT_USAGE)
    from agents.gc_tuning import freeze_startup_objects

    try:
        factory = fleet.simulated_collector_factory()
    except ImportError as exc:
        raise CommandFailed(str(exc), EXIT_FAILURE) from exc
    credentials = fleet_credentials(args)
    nodes = [(node.hostname, node.credential) for node in credentials.nodes[: args.nodes]]

    async def simulate(stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        if args.duration:
            loop.call_later(args.duration, stop.set)
        # Runs at run_fleet's first await, when every node's agent and state exist: they live as long
        # as the process, and N nodes' worth of them made each full collection a pause for all.
        loop.call_soon(freeze_startup_objects)
        await fleet.run_fleet(
            credentials.server_ws_url,
            nodes,
            args.profile,
            args.seed,
            args.faults,
            stop=stop,
            interval=args.interval or DEFAULT_INTERVAL_S,
            send_interval=args.send_interval,
            follow_server_interval=args.interval is None,
            collector_factory=factory,
        )

    run_until_signalled(simulate)
    return EXIT_OK


def fleet_credentials(args: argparse.Namespace) -> FleetCredentials:
    """The fleet's credentials, in order.

    With ``--enroll-token``: PREFIX0001..PREFIXN, from the file, enrolling those missing. Without it
    the fleet is the first ``--nodes`` of the nodes the file lists, whatever their names (a control
    plane may have issued them server-side, as the demo does)."""
    known = FleetCredentials(server_ws_url=websocket_url(args.server))
    path: Path | None = args.credentials_file
    if path is not None and path.exists():
        known = load_fleet_credentials(path)
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
            save_fleet_credentials(known, path)
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
        futures = [pool.submit(enroll_or_fail, server, token, hostname, simulated=True) for hostname in hostnames]
        for future in futures:
            try:
                enrolled = future.result()
            except CommandFailed as exc:
                failure = failure or exc
                continue
            into.server_ws_url = enrolled.server_ws_url or into.server_ws_url
            into.nodes.append(SimulatedNodeCredential(enrolled.hostname, enrolled.node_id, enrolled.credential))
    return failure
