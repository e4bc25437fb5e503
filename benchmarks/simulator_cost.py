"""What the fleet simulator's CPU costs per sample, by send interval: ``--nodes`` simulated nodes (the
real agent over the simulated model, as ``cp-agent simulate`` runs them) sampling every
``--interval`` seconds against the tests' fake control plane, which runs in a process of its own so
that only the simulator's CPU is counted; each ``--send-intervals`` value measured in turn, on a
fresh fleet, for ``--seconds`` after it settled.

    python benchmarks/simulator_cost.py [--nodes 300] [--interval 0.25] [--send-intervals 0,1,0,1] [--seconds 15]

The last line printed is JSON: each run's share of one core and its µs per node sample and per GPU sample.
"""

import argparse
import asyncio
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.simulator.fleet import run_fleet  # noqa: E402
from benchmarks.telemetry_harness import GPUS_PER_NODE, machine_load  # noqa: E402

SETTLE_S = 8  # every node connected and sending before the CPU is counted

CONTROL_PLANE = """
import asyncio, json, sys
from tests.agents.doubles import FakeControlPlane

async def serve(nodes: int, interval: float) -> None:
    control_plane = FakeControlPlane(interval_s=interval)
    credentials = [control_plane.add_node(f"sim-{i:04d}") for i in range(nodes)]
    await control_plane.start()
    print(json.dumps({"url": control_plane.url, "credentials": credentials}), flush=True)
    await asyncio.Event().wait()

asyncio.run(serve(int(sys.argv[1]), float(sys.argv[2])))
"""


async def measure(url: str, credentials: list[str], args: argparse.Namespace, send_interval: float) -> dict:
    stop = asyncio.Event()
    nodes = [(f"sim-{i:04d}", credential) for i, credential in enumerate(credentials)]
    fleet = asyncio.create_task(
        run_fleet(
            url, nodes, "h100", 1, stop=stop, interval=args.interval, send_interval=send_interval,
            follow_server_interval=False, report_interval=3600,
        )
    )  # fmt: skip
    await asyncio.sleep(SETTLE_S)
    cpu, started = time.process_time(), time.monotonic()
    await asyncio.sleep(args.seconds)
    cpu, elapsed = time.process_time() - cpu, time.monotonic() - started
    stop.set()
    await fleet
    node_samples = args.nodes * elapsed / args.interval
    return {
        "send_interval_s": send_interval,
        "cpu_percent": round(100 * cpu / elapsed, 1),
        "us_per_node_sample": round(1e6 * cpu / node_samples, 1),
        "us_per_gpu_sample": round(1e6 * cpu / node_samples / GPUS_PER_NODE, 1),
        "load_1m": machine_load(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between samples (default 0.25)")
    parser.add_argument("--send-intervals", default="0,1,0,1", help="measured in turn (default 0,1,0,1)")
    parser.add_argument("--seconds", type=float, default=15, help="each measured (default 15)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the fleet's connection notes are not the figure
    try:
        import uvloop
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run  # as cp-agent simulate runs
    runs = []
    for send_interval in [float(value) for value in args.send_intervals.split(",")]:
        command = [sys.executable, "-c", CONTROL_PLANE, str(args.nodes), str(args.interval)]
        control_plane = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
        try:
            assert control_plane.stdout is not None
            served = json.loads(control_plane.stdout.readline())
            runs.append(run(measure(served["url"], served["credentials"], args, send_interval)))
        finally:
            control_plane.kill()
            control_plane.wait()
        print(f"send interval {send_interval:g} s: {json.dumps(runs[-1])}", flush=True)
    print(json.dumps({"nodes": args.nodes, "interval_s": args.interval, "runs": runs}))


if __name__ == "__main__":
    main()
