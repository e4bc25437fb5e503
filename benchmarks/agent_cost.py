"""What the agent costs a GPU node: CPU (share of one core) and memory (RSS) of ``cp-agent run``
sampling 8 GPUs every second, measured from outside the agent's process.

The agent runs in a subprocess exactly as the systemd unit runs it (``cp-agent run``), against a
local WebSocket server that speaks the protocol (the test double of the control plane, which
acknowledges every frame). Its collector is the simulated backend (``--simulated h100``) when
``agents.simulator.model`` is installed, else the tests' synthetic collector that fills every field
of 8 GPUs and 8 ports; the JSON line says which. CPU is read from /proc/<pid>/stat over the
measured window (after a warm-up that covers imports and the first connect); RSS is VmRSS at the
end and the peak seen, from /proc/<pid>/status.

    python benchmarks/agent_cost.py [--duration 60] [--interval 1]

Targets: under 1 % of one core and under 60 MB. The last line printed is JSON:
{"agent_cpu_percent": ..., "agent_rss_mb": ..., "collector": "simulated"|"synthetic-8gpu", ...}
"""

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.agents.doubles import RUN_WITH_FAKE_COLLECTOR, FakeControlPlane, wait_until  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
HOSTNAME = "bench-001"


def simulated_backend_available() -> bool:
    try:
        import agents.simulator.model  # noqa: F401
    except ImportError:
        return False
    return True


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def measure(duration: float, warmup: float, interval: float) -> dict:
    control_plane = FakeControlPlane(interval_s=interval)
    await control_plane.start()
    credential = control_plane.add_node(HOSTNAME)
    simulated = simulated_backend_available()
    with tempfile.TemporaryDirectory() as work:
        config = Path(work) / "agent.json"
        config.write_text(
            json.dumps(
                {
                    "server_url": f"http://127.0.0.1:{control_plane.port}",
                    "server_ws_url": control_plane.url,
                    "node_id": 1,
                    "hostname": HOSTNAME,
                    "credential": credential,
                    "state_dir": str(Path(work) / "state"),
                }
            )
        )
        run = ["--log-level", "warning", "run", "--config", str(config), "--simulated", "h100"]
        program = ["-m", "agents.cli"] if simulated else ["-c", RUN_WITH_FAKE_COLLECTOR]
        command = [sys.executable, *program, *run]
        agent = subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        node = control_plane.node(HOSTNAME)
        try:
            await wait_until(lambda: node.stored_samples or agent.poll() is not None, timeout=30)
            if agent.poll() is not None:
                raise SystemExit(f"the agent exited with code {agent.returncode} before sending a sample")
            await asyncio.sleep(warmup)
            loop = asyncio.get_running_loop()
            started, cpu_before, stored_before = loop.time(), cpu_seconds(agent.pid), len(node.stored_samples)
            peak = 0.0
            while loop.time() - started < duration:
                await asyncio.sleep(1)
                peak = max(peak, rss_mb(agent.pid))
            elapsed = loop.time() - started
            cpu = cpu_seconds(agent.pid) - cpu_before
            rss = rss_mb(agent.pid)
            stored = len(node.stored_samples) - stored_before
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
            await control_plane.stop(abrupt=False)
    return {
        "agent_cpu_percent": round(100 * cpu / elapsed, 3),
        "agent_rss_mb": round(rss, 1),
        "agent_rss_peak_mb": round(peak, 1),
        "collector": "simulated" if simulated else "synthetic-8gpu",
        "gpus": 8,
        "interval_s": interval,
        "measured_s": round(elapsed, 1),
        "samples_delivered": stored,
        "agent_exit_code": agent.returncode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured (default 60)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after the first sample before measuring")
    parser.add_argument("--interval", type=float, default=1.0, help="sampling interval (default 1 s)")
    args = parser.parse_args()
    result = asyncio.run(measure(args.duration, args.warmup, args.interval))
    print(f"collector:          {result['collector']} (8 GPUs, sampled every {args.interval:g} s)")
    print(f"agent CPU:          {result['agent_cpu_percent']:.3f} % of one core over {result['measured_s']} s")
    print(f"agent RSS:          {result['agent_rss_mb']:.1f} MB (peak {result['agent_rss_peak_mb']:.1f} MB)")
    print(f"samples delivered:  {result['samples_delivered']}")
    print("targets:            CPU < 1 %, RSS < 60 MB")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
