"""``make demo`` end to end: the launcher starts the whole product, which answers with the printed
credentials and runs the README's examples as printed, and stopping it (however many signals arrive)
or losing one of its processes leaves nothing running."""

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from controlplane import demo
from tests.launched import BASE_DIR, Launched

START_TIMEOUT_S = 120
FLEET_TIMEOUT_S = 20  # from the banner to every simulated node online and reporting

pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the demo's processes through /proc"),
    pytest.mark.skipif(
        not demo.redis_answers(demo.LOCAL_REDIS_URL) and shutil.which("redis-server") is None,
        reason="needs a Redis on 127.0.0.1:6379 or redis-server on PATH",
    ),
]


class RunningDemo(Launched):
    def __init__(self, var_dir: Path) -> None:
        self.var_dir = var_dir
        self.port = demo.free_loopback_port()
        environment = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", str(var_dir)),
            "CONTROLPLANE_VAR_DIR": str(var_dir),
            "PORT": str(self.port),
        }
        super().__init__(["-m", "controlplane.demo"], environment)

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

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)
        for pid in self.processes():  # after a failure: leave nothing running
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# The results of the burn-in the examples have just started: minutes away when the examples run, so
# these answer (a page, or the shell's `set -e` and curl's --fail fail the run) but may find nothing.
RESULTS_STILL_TO_COME = ("/burn-in-nodes?state=failed", "/burn-in-checks?")


def readme_api_examples() -> list[str]:
    """The README's shell commands that call the control plane (``$CP``), continuation lines joined."""
    readme = (BASE_DIR / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", readme, flags=re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if "$CP" in line and not line.lstrip().startswith(("#", "export ")):
                commands.append(line)
    return commands


def run_as_printed(commands: list[str], server: str, token: str) -> list[str]:
    """Run ``commands`` in one shell, one after the other, with ``CP`` and ``TOKEN`` as the README
    exports them; any HTTP error fails the run. Returns what each printed."""
    end_of_output = "--- end of output ---"
    script = ["set -euo pipefail", 'curl() { command curl --fail-with-body --show-error "$@"; }']
    for command in commands:
        script += [command, f"echo; echo '{end_of_output}'"]
    shell = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        env={"PATH": os.environ["PATH"], "CP": server, "TOKEN": token},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shell.returncode == 0, f"{shell.stdout}\n{shell.stderr}"
    return [output.strip() for output in shell.stdout.split(end_of_output)[:-1]]


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("demo-var")


@pytest.fixture
def running_demo(var_dir) -> Iterator[RunningDemo]:
    running = RunningDemo(var_dir)
    yield running
    running.stop()


def test_it_serves_the_product_as_the_readme_says_and_stops_cleanly(running_demo):
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
    assert json.loads(running_demo.get("/api/v1/nodes", token)[1])["count"] == demo.FLEET_NODES  # imported
    running_demo.wait_for_output(r"worker \| .*celery@\S+ ready\.")
    running_demo.wait_for_output(r"beat \| .*beat: Starting")
    assert (running_demo.var_dir / "controlplane.sqlite3").exists()
    assert len(running_demo.processes()) >= 6  # launcher, server, agent gateway, worker, beat, fleet

    def online_nodes() -> int:
        return json.loads(running_demo.get("/api/v1/nodes?liveness=online", token)[1])["count"]

    def gpu_001_metrics(name: str = "DCGM_FI_DEV_GPU_UTIL") -> list[str]:
        text = running_demo.get("/metrics", token)[1].decode()
        return [line for line in text.splitlines() if line.startswith(f"{name}{{") and '"gpu-001"' in line]

    running_demo.wait_until(lambda: online_nodes() == demo.FLEET_NODES, FLEET_TIMEOUT_S, "the whole fleet online")
    running_demo.wait_until(lambda: len(gpu_001_metrics()) == 8, FLEET_TIMEOUT_S, "gpu-001's GPUs in /metrics")
    ports = "node_infiniband_port_data_received_bytes_total"
    running_demo.wait_until(lambda: gpu_001_metrics(ports), FLEET_TIMEOUT_S, "gpu-001's ports in /metrics")
    assert len(gpu_001_metrics("controlplane_node_lifecycle")) == 6  # one gauge per lifecycle state
    credentials = running_demo.var_dir / demo.FLEET_CREDENTIALS_FILE
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    fleet_credentials = json.loads(credentials.read_text())
    assert [node["hostname"] for node in fleet_credentials["nodes"]] == list(demo.FLEET_HOSTNAMES)

    # The fleet is online through the agent gateway, a server of its own that serves agents only.
    gateway = urlsplit(fleet_credentials["server_ws_url"])
    assert re.search(r"Agents:\s+(\S+)", running_demo.output).group(1) == fleet_credentials["server_ws_url"]
    assert (gateway.path, gateway.port != running_demo.port) == ("/ws/agent", True)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{gateway.port}/api/v1/me", timeout=10)
    assert refused.value.code == 404

    # The fleet starts once the server answers (the banner says so first): no connection is refused.
    banner = next(n for n, line in enumerate(running_demo.lines) if "GPU control plane demo is running" in line)
    fleet = next(n for n, line in enumerate(running_demo.lines) if line.startswith(" fleet | "))
    assert banner < fleet
    assert "Connection refused" not in running_demo.output

    commands = readme_api_examples()
    assert any("/api/v1/nodes?" in command for command in commands)  # the examples are found
    for command, output in zip(commands, run_as_printed(commands, running_demo.url(""), token), strict=True):
        if output and not any(query in command for query in RESULTS_STILL_TO_COME):  # an assignment prints nothing
            answer = json.loads(output)  # a page, an object, or a run's log lines (a list, which may be empty)
            assert not isinstance(answer, dict) or answer.get("count", 1) > 0, f"{command} found nothing"

    running_demo.signal_group(signal.SIGTERM)  # systemd, timeout or a supervisor stopping it
    running_demo.signal_launcher(signal.SIGTERM)  # and make, forwarding the signal
    running_demo.signal_group(signal.SIGINT)  # and an impatient Ctrl-C
    assert running_demo.process.wait(timeout=60) == 0
    assert running_demo.processes() == {}


def test_it_stops_everything_and_fails_when_one_process_dies(running_demo):
    running_demo.wait_for_output(r"API token: cpt_")
    beat = next(pid for pid, command in running_demo.processes().items() if command.endswith(" beat --loglevel INFO "))
    os.kill(beat, signal.SIGKILL)

    assert running_demo.process.wait(timeout=60) == 1
    assert "beat exited with status -9; stopping the demo" in running_demo.output
    assert running_demo.processes() == {}
