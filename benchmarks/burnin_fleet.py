"""burnin_fleet: the issue's 1,000-node quick burn-in on simulated nodes, run to its verdicts by the
product's own processes: uvicorn, a real Celery worker and Celery beat, on a scratch PostgreSQL and the
local Redis, and ``--nodes`` simulated agents (``cp-agent simulate``, each a real WebSocket client,
its checks simulated and labelled so, a check taking ``time_scale`` of a real one's time).

One cluster's nodes, new, start one burn-in of the ``quick`` suite (apps/burnin/starting.py, as the
API starts it); ``--faulty`` of them are scripted to fail one check each (a straggler GPU, a GPU on
PCIe x8, a pending row remap, an uncorrectable ECC error, cycled). The script waits until every
node of the burn-in is judged and prints what became of them: passed and in service, failed and
quarantined, or failed with the quarantine withheld because the cluster's circuit breaker opened;
the wall time from the start to the last verdict; and whether the breaker behaved: with the faulty
nodes within its share (10 % by default) it stays closed and every faulty node is quarantined, past
it at most its share is quarantined, the rest withheld, and it is open. ``met`` says whether every
node was judged, each faulty one failed, every other one passed, and the breaker behaved.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python benchmarks/burnin_fleet.py
        [--nodes 1000] [--faulty 20] [--timeout 900] [--fleet-processes 2]

Redis is ``REDIS_URL`` (default database 10 of the local Redis), under key prefixes of this run's own
(nothing is flushed). The machine's load average is printed beside the figures; the last line is JSON.
"""

import argparse
import json
import os
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.connected_fleet import add_fleet_arguments, connected_fleet, fleet_database, own_key_prefixes
from benchmarks.telemetry_harness import machine_load

_prefix = own_key_prefixes("burnin")

# One scripted fault a faulty node, cycled: each fails one check of the quick suite (tests/burnin/test_fleet.py).
FAULTS = ("straggler:gpu3", "x8:gpu1", "xid63@0:gpu2", "xid48@0:gpu5")
POLL_S = 2.0


def fault_spec(hostnames: list[str], faulty: int) -> tuple[str, list[str]]:
    """The simulator's fault spec for ``faulty`` nodes spread over the fleet, and those nodes."""
    chosen = hostnames[:: max(1, len(hostnames) // faulty)][:faulty] if faulty else []
    return " ".join(f"{host}:{FAULTS[i % len(FAULTS)]}" for i, host in enumerate(chosen)), chosen


def celery_commands(work: Path) -> list[list[str]]:
    """A Celery worker on the queues a burn-in uses, and beat for the sweeps, as production runs them."""
    celery = [sys.executable, "-m", "celery", "-A", "controlplane"]
    worker = [*celery, "worker", "-Q", "jobs,gateway,default", "-c", "2", "--without-mingle", "--without-gossip"]
    worker += ["-n", f"{_prefix}@%h", "--loglevel", "warning"]
    return [worker, [*celery, "beat", "-s", str(work / "beat"), "--loglevel", "warning"]]


def wait_until_judged(burn_in_id: int, nodes: int, started: float, timeout_s: float) -> float | None:
    """Seconds from ``started`` until every node of the burn-in was judged (None: not within the timeout)."""
    from apps.burnin.choices import NodeState
    from apps.burnin.models import BurnInNode

    reported = 0.0
    while time.monotonic() - started < timeout_s:
        states = Counter(BurnInNode.objects.filter(burn_in_id=burn_in_id).values_list("state", flat=True))
        if states[NodeState.TESTING] == 0 and sum(states.values()) == nodes:
            return time.monotonic() - started
        if time.monotonic() - reported > 30:
            reported = time.monotonic()
            print(f"  {time.monotonic() - started:.0f} s: {dict(states)} (load {machine_load()})", flush=True)
        time.sleep(POLL_S)
    return None


def verdicts(burn_in_id: int, faulty: list[str]) -> dict:
    from apps.burnin.choices import NodeState, Outcome
    from apps.burnin.models import BurnIn, BurnInNode, QuarantineBreaker

    burn_in = BurnIn.objects.select_related("run", "cluster").get(pk=burn_in_id)
    rows = list(BurnInNode.objects.filter(burn_in=burn_in).select_related("node"))
    failed = {row.node.hostname for row in rows if row.state == NodeState.FAILED}
    outcomes = Counter(row.outcome for row in rows)
    breaker = QuarantineBreaker.objects.get(cluster=burn_in.cluster)
    allowed = breaker.allowed()  # the product's own count: its share of the cluster, at least one
    quarantined, withheld = outcomes[Outcome.QUARANTINED], outcomes[Outcome.WITHHELD]
    if len(faulty) <= allowed:
        breaker_ok = not breaker.is_open and quarantined == len(faulty) and withheld == 0
    else:
        breaker_ok = breaker.is_open and quarantined <= allowed and quarantined + withheld == len(faulty)
    return {
        "judged": sum(1 for row in rows if row.state != NodeState.TESTING),
        "passed": sum(1 for row in rows if row.state == NodeState.PASSED),
        "failed": len(failed),
        "in_service": outcomes[Outcome.IN_SERVICE],
        "quarantined": quarantined,
        "withheld": withheld,
        "failed_as_scripted": failed == set(faulty),
        "run_state": burn_in.run.state,
        "breaker": {"open": breaker.is_open, "percent": breaker.effective_percent, "allowed": allowed},
        "breaker_behaved": breaker_ok,
        "example_reason": next((row.reason for row in rows if row.state == NodeState.FAILED), "")[:300],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_fleet_arguments(parser, interval=5.0, scratch_database="bench_burnin")
    parser.add_argument("--faulty", type=int, default=20, help="nodes scripted to fail a check (default 20)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for the verdicts (default 900)")
    args = parser.parse_args()

    load_at_start = machine_load()
    with fleet_database(args) as database:
        from django.utils import timezone

        from apps.burnin.models import Suite
        from apps.burnin.starting import start_burn_in
        from apps.inventory.models import Cluster, Node

        spec, faulty = fault_spec(database.hostnames, args.faulty)
        with connected_fleet(database, args, faults=spec, companions=celery_commands(database.work)):
            nodes = list(Node.objects.filter(pk__in=database.node_ids).order_by("pk"))
            cluster = Cluster.objects.get(name="bench")
            started = time.monotonic()
            burn_in = start_burn_in(
                nodes,
                Suite.objects.get(name="quick"),
                actor="bench",
                deadline=timezone.now() + timedelta(seconds=args.timeout),
                cluster=cluster,
            )
            steps = len(burn_in.suite.run_steps())
            print(f"burn-in {burn_in.pk} started: {args.nodes} nodes x {steps} steps, {len(faulty)} scripted to fail")
            wall_s = wait_until_judged(burn_in.pk, args.nodes, started, args.timeout)
            result = verdicts(burn_in.pk, faulty)
    met = (
        wall_s is not None
        and result["judged"] == args.nodes
        and result["failed_as_scripted"]
        and result["passed"] == args.nodes - len(faulty)
        and result["breaker_behaved"]
    )
    print(
        f"{result['judged']}/{args.nodes} judged in {wall_s or float('nan'):.0f} s: {result['passed']} passed "
        f"({result['in_service']} into service), {result['failed']} failed ({result['quarantined']} quarantined, "
        f"{result['withheld']} withheld); breaker {'open' if result['breaker']['open'] else 'closed'} "
        f"({'as it should be' if result['breaker_behaved'] else 'NOT as it should be'}) (load {machine_load()})"
    )
    print(
        json.dumps(
            {
                "benchmark": "burnin_fleet",
                "nodes": args.nodes,
                "steps": steps,
                "faulty": len(faulty),
                "wall_s": round(wall_s, 1) if wall_s is not None else None,
                **result,
                "simulated": True,
                "met": met,
                "load_at_start": load_at_start,
                "load_at_end": machine_load(),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
