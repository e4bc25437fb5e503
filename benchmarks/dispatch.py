"""The issue's dispatch figures: ``--nodes`` simulated agents (``cp-agent simulate``, each a real
WebSocket client) connected to the control plane (uvicorn on a scratch PostgreSQL and Redis), and one
command sent to all of them, ``--rounds`` times, once every agent is connected and its first
inventory applied (benchmarks/connected_fleet.py).

Each round measures two ways of getting one ``health`` command to every agent, until every agent has
acknowledged it (its ``CommandStarted`` stored: the command's row is running or over):

- ``raw``: the command rows written and marked sent by hand, and their frames sent straight through
  the channel layer, one ``group_send`` to each node's agent group (apps/gateway/push.py), all at once;
- ``dispatch``: the product's own path, ``Run.objects.launch`` of one run on every node: the run and
  its commands written, the start task (run here, eagerly, in this process, as a worker would),
  each node advanced, every command claimed and sent, the frames carried by the gateway.

``all_acked_ms`` is the dispatch time (median of the rounds), ``group_send_ratio`` its ratio to the raw
time of the same round (median), ``commands_lost`` the dispatched commands never acknowledged within
``--ack-timeout``; resends (``attempts`` above 1) are counted too. The machine's load average is
printed beside every figure (the machine is shared). The last line printed is JSON.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/dispatch.py
        [--nodes 1000] [--rounds 3] [--interval 1] [--workers 1] [--fleet-processes 2]

Redis is ``REDIS_URL`` (default database 10 of the local Redis), under key prefixes of this run's own
(nothing is flushed). No Celery worker runs: the start task runs eagerly in this process, and during a
dispatch round the jobs' sweep runs every ``JOBS_SWEEP_S`` here as beat would run it (what the channel
layer refused, or an agent lost with its connection, is sent again: the at-least-once path, counted
as ``resent``); a finished command's follow-up tasks wait in this run's queue and are dropped with it,
so the runs are not judged (benchmarks/burnin_fleet.py judges a burn-in, with its worker). Each
round also says how many agent connections were lost, by the agents' reason (a close code, mostly).
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.connected_fleet import add_fleet_arguments, connected_fleet, fleet_database, own_key_prefixes
from benchmarks.telemetry_harness import Fleet, machine_load

own_key_prefixes("dispatch")

ACKED = ("running", "succeeded", "failed", "cancelled")
POLL_S = 0.02


class Sweeper(threading.Thread):
    """The jobs' sweep every ``JOBS_SWEEP_S``, as Celery beat runs it in production (its tasks run here,
    eagerly), during a dispatch round: what the channel layer refused, or an agent lost with its
    connection, is sent again. Not during a raw round, whose frames are sent once."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="jobs-sweep")
        self.stopped = threading.Event()
        self.resent = 0

    def run(self) -> None:
        from django.conf import settings
        from django.db import connection
        from django.utils import timezone

        from apps.jobs import dispatch

        while not self.stopped.wait(settings.JOBS_SWEEP_S):
            self.resent += dispatch.sweep(timezone.now())["resent"]
        connection.close()


def wait_until_acked(run_id: int, count: int, started: float, timeout_s: float) -> tuple[float | None, int]:
    """Milliseconds from ``started`` until every command of the run was acknowledged (None: not within
    the timeout), and how many were acknowledged."""
    from apps.jobs.models import Command

    acked = 0
    while time.monotonic() - started < timeout_s:
        acked = Command.objects.filter(run_id=run_id, state__in=ACKED).count()
        if acked == count:
            return (time.monotonic() - started) * 1000, acked
        time.sleep(POLL_S)
    return None, acked


def launch(nodes: list, title: str):  # noqa: ANN201  (a Run: Django models are imported late)
    from apps.jobs.models import Run, Step

    deadline = datetime.now(UTC) + timedelta(minutes=10)
    return Run.objects.launch(nodes=nodes, steps=[Step("health")], deadline=deadline, actor="bench", title=title)


def raw_round(nodes: list, timeout_s: float) -> tuple[float | None, int]:
    """One command a node, written and marked sent by hand, its frames group_sent to every node at once."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from agents import protocol
    from apps.gateway.push import agent_group
    from apps.jobs.models import Command

    with mock.patch("apps.jobs.queue.start_run"):  # written, not started: this round sends it itself
        run = launch(nodes, "raw group_send")
    commands = list(Command.objects.filter(run=run))
    Command.objects.filter(run=run).update(state="sent", attempts=1, sent_at=datetime.now(UTC))
    messages = [
        (agent_group(c.node_id), {"type": "agent.deliver", "frame": protocol.encode(c.message()).decode()})
        for c in commands
    ]

    async def send_all() -> None:
        layer = get_channel_layer()
        await asyncio.gather(*(layer.group_send(group, message) for group, message in messages))

    started = time.monotonic()
    async_to_sync(send_all)()
    acked = wait_until_acked(run.pk, len(commands), started, timeout_s)
    # Over before the dispatch round, whose command each agent must not queue behind this one.
    deadline = time.monotonic() + timeout_s
    while Command.objects.filter(run=run, state__in=("pending", "sent", "running")).exists():
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return acked


def dispatch_round(nodes: list, timeout_s: float) -> tuple[float | None, int, int, float | None]:
    from apps.jobs.models import Command

    sweeper = Sweeper()
    sweeper.start()
    started = time.monotonic()
    run = launch(nodes, "dispatch")
    elapsed, acked = wait_until_acked(run.pk, len(nodes), started, timeout_s)
    sweeper.stopped.set()
    sweeper.join()
    resent = Command.objects.filter(run=run, attempts__gt=1).count()
    return elapsed, acked, resent, agent_started_ms(run.pk, started)


def agent_started_ms(run_id: int, started: float) -> float | None:
    """When the last agent said it started its command (its own clock, the same machine's), in ms from
    ``started``: what of the wait is delivery to the agents, and what is storing their answers."""
    from django.db.models import Max

    from apps.jobs.models import Command

    last = Command.objects.filter(run_id=run_id).aggregate(last=Max("started_at"))["last"]
    if last is None:
        return None
    return round((last.timestamp() - (time.time() - (time.monotonic() - started))) * 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fleet_arguments(parser, interval=1.0, scratch_database="bench_dispatch")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of raw + dispatch (default 3)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")
    parser.add_argument("--ack-timeout", type=float, default=60, help="seconds a round waits for acks (default 60)")
    args = parser.parse_args()

    load_at_start = machine_load()
    with fleet_database(args) as database, connected_fleet(database, args, workers=args.workers) as fleet:
        from apps.inventory.models import Node
        from controlplane.celery import app as celery_app

        celery_app.conf.task_always_eager = True  # the start task runs here, once the launch commits
        nodes = list(Node.objects.filter(pk__in=database.node_ids).order_by("pk"))
        rounds = []
        for number in range(1, args.rounds + 1):
            lost_before = connections_lost(fleet)
            raw_ms, raw_acked = raw_round(nodes, args.ack_timeout)
            dispatch_ms, acked, resent, last_start_ms = dispatch_round(nodes, args.ack_timeout)
            lost = connections_lost(fleet) - lost_before
            rounds.append(
                {
                    "raw_ms": raw_ms,
                    "raw_acked": raw_acked,
                    "all_acked_ms": dispatch_ms,
                    "acked": acked,
                    "resent": resent,
                    "last_agent_start_ms": last_start_ms,
                    "agent_connections_lost": dict(lost),
                    "load": machine_load(),
                }
            )
            print(
                f"round {number}: dispatch {fmt(dispatch_ms)} ms ({acked}/{args.nodes} acked, {resent} resent, "
                f"the last agent started at {fmt(last_start_ms)} ms), "
                f"raw group_send {fmt(raw_ms)} ms ({raw_acked} acked); "
                f"agent connections lost: {dict(lost) or 'none'} (load {machine_load()})",
                flush=True,
            )
    print(json.dumps(report(args.nodes, rounds, load_at_start)))


def connections_lost(fleet: Fleet) -> Counter[str]:
    """The fleet's lost connections so far, by the agents' reason (a close code, mostly)."""
    return sum((simulator.connections_lost for simulator in fleet.simulators), Counter())


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def report(nodes: int, rounds: list[dict], load_at_start: float) -> dict:
    timed = [r for r in rounds if r["all_acked_ms"] is not None and r["raw_ms"]]
    return {
        "agents": nodes,
        "rounds": len(rounds),
        "all_acked_ms": round(statistics.median(r["all_acked_ms"] for r in timed)) if timed else None,
        "group_send_ms": round(statistics.median(r["raw_ms"] for r in timed)) if timed else None,
        "group_send_ratio": round(statistics.median(r["all_acked_ms"] / r["raw_ms"] for r in timed), 2)
        if timed
        else None,
        "commands_lost": sum(nodes - r["acked"] for r in rounds),
        "commands_resent": sum(r["resent"] for r in rounds),
        "each_round": rounds,
        "load_at_start": load_at_start,
        "load_at_end": machine_load(),
        "cpus": os.cpu_count(),
        "start_task": "eager, in the benchmark's process",
    }


if __name__ == "__main__":
    main()
