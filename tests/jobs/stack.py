"""The whole product as separate processes on 127.0.0.1, for fault tests and the fault benchmark: a
private redis-server, uvicorn, a Celery worker, Celery beat, and ``cp-agent run`` per node (simulated
GPUs, checks as processes of a stand-in that counts its runs), on a database of its own (a SQLite
file, or a scratch PostgreSQL database next to ``DATABASE_URL``'s). Each part can be killed or
restarted alone; everything stops with the stack, each process group by its own id.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import msgspec

from agents.config import AgentConfig
from controlplane.demo import free_loopback_port, is_listening, redis_answers
from tests.agents.commands.conftest import STANDIN
from tests.launched import BASE_DIR, Launched

START_TIMEOUT_S = 90.0


class Stack:
    def __init__(self, directory: Path, *, nodes: int, database_url: str) -> None:
        self.directory = directory
        self.redis_port = free_loopback_port()
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.marker = directory / "runs.txt"
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", str(directory)),
            "CONTROLPLANE_VAR_DIR": str(directory),
            "DATABASE_URL": database_url,
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "SECRET_KEY": "fault-tests-only-" + "x" * 40,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SECURE_SSL_REDIRECT": "false",
            "SECURE_COOKIES": "false",
            "CHANNEL_LAYER_PREFIX": "faults",
            "CELERY_KEY_PREFIX": "faults:",
            "JOBS_ACK_TIMEOUT_S": "2",
            "JOBS_SWEEP_S": "1",
            "LOG_LEVEL": "WARNING",
        }
        self.processes: dict[str, Launched] = {}
        self.node_count = nodes
        self.nodes: list[dict[str, Any]] = []
        self.token = ""

    # Starting -------------------------------------------------------------------------------------

    def start(self) -> None:
        self.start_redis()
        self.admin("migrate", manage=True)
        seeded = self.admin("seed", "--nodes", str(self.node_count))
        self.nodes, self.token = seeded["nodes"], seeded["token"]
        self.start_server()
        self.start_worker()
        self._launch("beat", ["-m", "celery", "-A", "controlplane", "beat", "-s", str(self.directory / "beat")])
        for node in self.nodes:
            self.start_agent(node)

    def start_redis(self) -> None:
        argv = ["--bind", "127.0.0.1", "--port", str(self.redis_port), "--save", "", "--appendonly", "no"]
        self.processes["redis"] = Launched(argv, self.env, executable="redis-server")
        self._wait(lambda: redis_answers(self.env["REDIS_URL"]), "redis")

    def start_server(self) -> None:
        argv = ["-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1", "--port", str(self.port)]
        self._launch("server", argv)
        self._wait(lambda: is_listening(self.port), "server")

    def start_worker(self) -> None:
        # Two queues as in production: the liveness sweep never waits behind jobs; prefetch 1 (settings).
        argv = ["-m", "celery", "-A", "controlplane", "worker", "-Q", "jobs,gateway,default", "-c", "2"]
        self._launch("worker", [*argv, "--without-mingle", "--without-gossip", "-n", "faults@%h"])

    def start_agent(self, node: dict[str, Any]) -> None:
        state = self.directory / node["hostname"]
        config = AgentConfig(
            server_url=self.url,
            server_ws_url=f"ws://127.0.0.1:{self.port}/ws/agent",
            node_id=node["node_id"],
            hostname=node["hostname"],
            credential=node["credential"],
            state_dir=str(state),
        )
        state.mkdir(exist_ok=True)
        (state / "agent.json").write_bytes(msgspec.json.encode(config))
        program = f"{sys.executable} {STANDIN}"
        argv = ["-m", "agents.cli", "--log-level", "warning", "run", "--config", str(state / "agent.json")]
        self._launch(node["hostname"], [*argv, "--simulated", "h100", "--interval", "1", "--check-program", program])

    def _launch(self, name: str, argv: list[str]) -> None:
        self.processes[name] = Launched(argv, self.env)

    def _wait(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not condition():
            assert time.monotonic() < deadline, f"{what} did not start:\n{self.output(what)}"
            time.sleep(0.1)

    def admin(self, *argv: str, manage: bool = False) -> dict[str, Any]:
        command = ["manage.py", *argv, "--verbosity", "0"] if manage else ["-m", "tests.jobs.stack_admin", *argv]
        done = subprocess.run(
            [sys.executable, *command], cwd=BASE_DIR, env=self.env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return {} if manage else json.loads(done.stdout.strip().splitlines()[-1])

    # Faults -------------------------------------------------------------------------------------

    def kill(self, name: str, signum: int = signal.SIGKILL) -> None:
        """Signal the part's whole process group and wait for its leader (a worker's pool goes with it)."""
        launched = self.processes[name]
        with contextlib.suppress(ProcessLookupError):
            launched.signal_group(signum)
        launched.process.wait(timeout=60)

    def restart_redis(self) -> None:
        """Redis dies (SIGKILL) and comes back empty: the queues, the channel layer's groups, all gone."""
        self.kill("redis")
        self.start_redis()

    def restart_server(self) -> None:
        self.kill("server", signal.SIGTERM)
        self.start_server()

    # Reading ------------------------------------------------------------------------------------

    def get(self, path: str) -> Any:
        request = urllib.request.Request(f"{self.url}{path}", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except OSError:  # the server restarting
            return None

    def runs(self) -> list[str]:
        """The command keys the stand-in ran, once a line per run."""
        return [line.split()[0] for line in self.marker.read_text().splitlines()] if self.marker.exists() else []

    def liveness(self) -> str:
        """Each part's state, for a failure's message: running, or the exit status it died with."""
        states = {name: launched.process.poll() for name, launched in self.processes.items()}
        return ", ".join(f"{name} {'running' if code is None else f'exited {code}'}" for name, code in states.items())

    def output(self, name: str) -> str:
        launched = self.processes.get(name)
        return launched.output[-4000:] if launched else ""

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            launched = self.processes[name]
            if launched.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    launched.signal_group(signal.SIGTERM)
                try:
                    launched.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    launched.signal_group(signal.SIGKILL)
                    launched.process.wait(timeout=15)
