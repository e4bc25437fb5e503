"""``make demo`` end to end: the launcher starts the whole product, which answers with the printed
credentials, and stopping it (or losing one of its processes) leaves nothing running."""

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controlplane import demo

BASE_DIR = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 120
FLEET_TIMEOUT_S = 20  # from the banner to every simulated node online and reporting

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the demo's processes through /proc"),
    pytest.mark.skipif(
        not demo.redis_answers(demo.LOCAL_REDIS_URL) and shutil.which("redis-server") is None,
        reason="needs a Redis on 127.0.0.1:6379 or redis-server on PATH",
    ),
]


class RunningDemo:
    def __init__(self, var_dir: Path) -> None:
        self.var_dir = var_dir
        self.port = demo.free_loopback_port()
        environment = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", str(var_dir)),
            "CONTROLPLANE_VAR_DIR": str(var_dir),
            "PORT": str(self.port),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "controlplane.demo"],
            cwd=BASE_DIR,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_output(self, pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + START_TIMEOUT_S
        while (match := re.search(pattern, self.output)) is None:
            assert self.process.poll() is None, f"the demo exited early:\n{self.output}"
            assert time.monotonic() < deadline, f"no {pattern!r} after {START_TIMEOUT_S} s:\n{self.output}"
            time.sleep(0.2)
        return match

    def wait_until(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert self.process.poll() is None, f"the demo exited early:\n{self.output}"
            assert time.monotonic() < deadline, f"not {what} after {timeout_s} s:\n{self.output}"
            time.sleep(0.5)

    def get(self, path: str, token: str | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()

    def processes(self) -> dict[int, str]:
        """Pid and command line of every process started with this demo's var directory."""
        marker = f"CONTROLPLANE_VAR_DIR={self.var_dir}".encode()
        found = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if marker in (proc / "environ").read_bytes().split(b"\0"):
                    found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:  # gone meanwhile, or not ours
                continue
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo-var")


@pytest.fixture
def running_demo(var_dir) -> Iterator[RunningDemo]:
    running = RunningDemo(var_dir)
    yield running
    running.stop()


def test_it_serves_the_product_with_the_printed_credentials_and_stops_cleanly(running_demo):
    token = running_demo.wait_for_output(r"API token: (cpt_\S+)").group(1)
    assert re.search(r"user admin\s+password \S{12,}", running_demo.output)

    status, body = running_demo.get("/api/v1/me", token)
    assert (status, json.loads(body)["username"], json.loads(body)["role"]) == (200, "admin", "admin")
    assert running_demo.get("/api/docs/")[0] == 200
    assert running_demo.get("/admin/login/")[0] == 200
    assert running_demo.get("/static/admin/css/base.css")[0] == 200
    assert running_demo.get("/login/")[0] == 200  # the dashboard's sign-in
    for asset in ("dashboard/app.css", "dashboard/fleet.js", "vendor/uplot/uPlot.esm.js"):
        assert running_demo.get(f"/static/{asset}")[0] == 200, asset  # collected, served without npm
    if demo.EXAMPLE_INVENTORY.exists():  # imported into the empty database
        assert json.loads(running_demo.get("/api/v1/nodes", token)[1])["count"] > 0
    running_demo.wait_for_output(r"worker \| .*celery@\S+ ready\.")
    running_demo.wait_for_output(r"beat \| .*beat: Starting")
    assert (running_demo.var_dir / "controlplane.sqlite3").exists()
    assert len(running_demo.processes()) >= 5  # launcher, server, worker, beat, fleet

    def online_nodes() -> int:
        return json.loads(running_demo.get("/api/v1/nodes?liveness=online", token)[1])["count"]

    def gpu_001_metrics() -> list[str]:
        text = running_demo.get("/metrics", token)[1].decode()
        return [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and "gpu-001" in line]

    running_demo.wait_until(lambda: online_nodes() == demo.FLEET_NODES, FLEET_TIMEOUT_S, "the whole fleet online")
    running_demo.wait_until(lambda: len(gpu_001_metrics()) == 8, FLEET_TIMEOUT_S, "gpu-001's GPUs in /metrics")
    credentials = running_demo.var_dir / demo.FLEET_CREDENTIALS_FILE
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    assert [node["hostname"] for node in json.loads(credentials.read_text())["nodes"]] == list(demo.FLEET_HOSTNAMES)

    running_demo.process.send_signal(signal.SIGTERM)
    assert running_demo.process.wait(timeout=60) == 0
    assert running_demo.processes() == {}


def test_it_stops_everything_and_fails_when_one_process_dies(running_demo):
    running_demo.wait_for_output(r"API token: cpt_")
    beat = next(pid for pid, command in running_demo.processes().items() if command.endswith(" beat --loglevel INFO "))
    os.kill(beat, signal.SIGKILL)

    assert running_demo.process.wait(timeout=60) == 1
    assert "beat exited with status -9; stopping the demo" in running_demo.output
    assert running_demo.processes() == {}
