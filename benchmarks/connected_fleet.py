"""What benchmarks/dispatch.py and benchmarks/burnin_fleet.py share before and after their figures:
their key prefixes on the shared Redis, the fleet's arguments, a scratch PostgreSQL database with
``--nodes`` nodes and their credentials, and the control plane (uvicorn, and whatever runs beside it)
with the simulated fleet connected to it, torn down in the order that lets the database be dropped."""

import argparse
import os
import secrets
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.scratch_database import scratch_postgresql
from benchmarks.server_processes import REPO, Server
from benchmarks.telemetry_harness import (
    Fleet,
    machine_load,
    prepare_fleet,
    stop_gently,
    wait_until_connected,
    wait_until_discovered,
)

FLEET_DURATION_S = 3600


def own_key_prefixes(benchmark: str) -> str:
    """Key prefixes of this run's own on the shared Redis (nothing is flushed); call it before Django
    is set up, which reads them."""
    prefix = f"bench-{benchmark}-{secrets.token_hex(4)}"
    os.environ["CHANNEL_LAYER_PREFIX"] = prefix
    os.environ["CELERY_KEY_PREFIX"] = prefix
    return prefix


def add_fleet_arguments(parser: argparse.ArgumentParser, *, interval: float, scratch_database: str) -> None:
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes, one agent each (default 1000)")
    parser.add_argument(
        "--interval", type=float, default=interval, help=f"the agents' telemetry interval, s (default {interval:g})"
    )
    parser.add_argument("--fleet-processes", type=int, default=2, help="simulator processes (default 2)")
    parser.add_argument("--scratch-database", default=scratch_database, help=f"default {scratch_database}")


@dataclass(frozen=True)
class FleetDatabase:
    work: Path
    credentials: list[tuple[str, int, str]]  # (hostname, node id, credential), in hostname order

    @property
    def node_ids(self) -> list[int]:
        return [node_id for _, node_id, _ in self.credentials]

    @property
    def hostnames(self) -> list[str]:
        return [hostname for hostname, _, _ in self.credentials]


@contextmanager
def fleet_database(args: argparse.Namespace) -> Iterator[FleetDatabase]:
    """A scratch PostgreSQL database holding ``args.nodes`` nodes with credentials, and a work folder."""
    with tempfile.TemporaryDirectory() as work, scratch_postgresql(args.scratch_database):
        from asgiref.sync import async_to_sync

        from apps.core.process import process

        try:
            yield FleetDatabase(Path(work), prepare_fleet(args.nodes)[0])
        finally:
            # What ran in this process (tasks run eagerly, the burn-in's start) woke its parts, the change
            # publisher's database thread among them: they let go of their connections before the drop.
            async_to_sync(process.shutdown)()


@contextmanager
def connected_fleet(
    database: FleetDatabase,
    args: argparse.Namespace,
    *,
    workers: int = 1,
    faults: str = "",
    companions: Sequence[list[str]] = (),
) -> Iterator[Fleet]:
    """The control plane with ``workers`` uvicorn processes, its Celery tasks queued (not run eagerly),
    ``companions`` (commands run beside it with its environment: a Celery worker, beat), and the fleet,
    every agent connected and its first inventory applied. On the way out the agents close their
    sockets before anything stops."""
    server = Server(workers)
    server.env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    server.start()
    started = [subprocess.Popen(argv, cwd=REPO, env=server.env, stdin=subprocess.DEVNULL) for argv in companions]
    fleet = Fleet(
        server.url, database.credentials, args.interval, args.fleet_processes, database.work, FLEET_DURATION_S, faults
    )
    try:
        try:
            connect_s = wait_until_connected(database.node_ids, timeout_s=max(60.0, args.nodes / 10))
        except SystemExit:
            lost = sum((simulator.connections_lost for simulator in fleet.simulators), Counter())
            print(f"agent connections lost meanwhile: {dict(lost)} (load {machine_load()})", flush=True)
            raise
        print(f"{args.nodes} agents connected in {connect_s:.1f} s (load {machine_load()})", flush=True)
        discovered_s = wait_until_discovered(database.node_ids, timeout_s=max(60.0, args.nodes / 5))
        print(f"their inventories applied {discovered_s:.1f} s later (load {machine_load()})", flush=True)
        yield fleet
    finally:
        stop_gently(fleet)
        for companion in started:
            companion.terminate()
        for companion in started:
            companion.wait(timeout=60)
        server.stop()
