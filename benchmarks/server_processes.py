"""The control plane a benchmark measures, as production runs it: uvicorn on a scratch PostgreSQL
database, restartable on its ports, with or without agent gateway processes of its own; and the CPU
its processes used."""

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
# Every benchmark's server: Redis database 10 unless told (each benchmark flushes it first), and a secret
# of its own for the production settings the server runs on.
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/10")
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SERVER_START_TIMEOUT_S = 90
GRACEFUL_SHUTDOWN_S = 10


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def process_tree(pid: int) -> list[int]:
    """``pid`` and its children (uvicorn --workers runs the workers as children)."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    found = [pid]
    try:
        listed = children.read_text().split()
    except OSError:
        return found
    for child in listed:
        found.extend(process_tree(int(child)))
    return found


def server_environment() -> dict[str, str]:
    """The control plane's environment: the scratch database, production settings over plain HTTP."""
    from django.db import connection

    parts = urlsplit(os.environ["DATABASE_URL"])
    env = {
        **os.environ,
        "DATABASE_URL": urlunsplit(parts._replace(path=f"/{connection.settings_dict['NAME']}")),
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_COOKIES": "false",
        "PYTHONPATH": str(REPO),
    }
    env.pop("TEST_DATABASE_NAME", None)
    return env


class Uvicorn:
    """One ASGI application of the control plane under uvicorn, ``workers`` processes on one port."""

    def __init__(self, application: str, workers: int, env: dict[str, str]) -> None:
        self.application, self.workers, self.env = application, workers, env
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "uvicorn", f"controlplane.asgi:{self.application}", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--lifespan", "on", "--log-level", "warning"]
        # A restart waits at most this long for the open sockets (2,000 agents') before it closes them.
        command += ["--workers", str(self.workers), "--timeout-graceful-shutdown", str(GRACEFUL_SHUTDOWN_S)]
        self.process = subprocess.Popen(command, cwd=REPO, env=self.env, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the control plane's {self.application} did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is None:
            return
        pids = process_tree(self.process.pid)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pid in pids[1:]:  # a worker its supervisor left behind would hold the scratch database open
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process = None

    def pids(self) -> list[int]:
        return process_tree(self.process.pid) if self.process else []


class Server:
    """The control plane: uvicorn with ``workers`` processes on one port (``url``), and with ``gateways``
    the agent gateway in that many processes on another (``agent_url``), as README "Running in
    production" runs them; without, the ``workers`` serve the agents too. ``restart`` stops it
    (SIGTERM, as a deploy does) and starts it again on the same ports."""

    def __init__(self, workers: int, gateways: int = 0) -> None:
        self.env = server_environment()
        self.web = Uvicorn("application", workers, self.env)
        self.gateway = Uvicorn("agent_gateway", gateways, self.env) if gateways else None
        self.port = self.web.port
        self.url = f"http://127.0.0.1:{self.port}"
        self.agent_url = f"http://127.0.0.1:{self.gateway.port}" if self.gateway else self.url
        self.workers, self.gateways = workers, gateways

    def parts(self) -> list[Uvicorn]:
        return [self.web, self.gateway] if self.gateway else [self.web]

    def start(self) -> None:
        for part in self.parts():
            part.start()

    def stop(self) -> None:
        for part in self.parts():
            part.stop()

    def restart(self) -> float:
        """Stop and start again; the seconds it did not answer."""
        stopped_at = time.monotonic()
        self.stop()
        self.start()
        return time.monotonic() - stopped_at

    def cpu(self) -> float:
        return cpu_seconds([pid for part in self.parts() for pid in part.pids()])
