"""``make demo``: the whole product on one machine, with nothing to configure.

The launcher, in order: fills in development-safe settings, finds or starts a Redis, prepares the
embedded SQLite database (``manage.py seed_demo``: migrations, static files, the example inventory,
example prices, an admin account with a fresh password, the simulated fleet's credentials), starts
the ASGI server, the agent gateway (the agents' sockets in a process of their own, as in production:
controlplane/asgi.py says why), a Celery worker and Celery beat, and once both servers answer, the
simulated fleet, connected to the gateway.
Each child's output is prefixed with its name (controlplane/supervisor.py). Ctrl-C or SIGTERM, once
or many times, stops them all; if one dies, the rest are stopped and the launcher exits non-zero.

The launcher itself never imports Django and never changes its own environment: every child gets
the demo's environment explicitly. The demo never touches what the tests use: its database is the
SQLite file under ``var/`` (an inherited ``DATABASE_URL`` is ignored, and so is an inherited
``AGENT_WS_URL``: agents enrolled with the demo connect to its gateway), and on a Redis it finds on
127.0.0.1:6379 it uses database 1, leaving 0 to the tests, with keys of its own (derived from its
var directory) so that two demos on one machine do not hear each other.
"""

import hashlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import msgspec

from controlplane.supervisor import ChildExited, Supervisor

BASE_DIR = Path(__file__).resolve().parent.parent

HOST = "127.0.0.1"  # loopback only: the demo admin's password is printed on the console
DEFAULT_PORT = 8000
DEMO_REDIS_DB = 1  # the tests use database 0 of the same local Redis
LOCAL_REDIS_URL = f"redis://127.0.0.1:6379/{DEMO_REDIS_DB}"

# The simulated fleet is the example inventory's nodes: the file carries these nodes' simulated
# identities (profile and seed), so they connect without a single "GPU swapped".
FLEET_HOSTNAMES = tuple(f"gpu-{number:03d}" for number in range(1, 17))
FLEET_NODES = len(FLEET_HOSTNAMES)
FLEET_PROFILE = "h100"
FLEET_SEED = 1
FLEET_CREDENTIALS_FILE = "fleet-credentials.json"  # under the var directory
# Alive but sane: a straggler from the start, one GPU overheating for ten minutes after half a minute,
# one falling off the bus after two, one GPU whose PCIe link trained at x8. The fleet runs the quick
# burn-in when it first comes online (BURNIN_ON_ENROLLMENT): the straggler and the x8 link fail it and
# are quarantined, the others go into service before their faults begin.
FLEET_FAULTS = "gpu-005:straggler:gpu3 gpu-009:thermal@30+600:gpu6 gpu-012:xid79@120:gpu2 gpu-014:x8:gpu1"

READY_TIMEOUT_S = 90
REDIS_START_TIMEOUT_S = 10
REDIS_INSTALL_HINT = (
    "The demo needs Redis (channel layer and Celery broker). Either start one on 127.0.0.1:6379, set "
    "REDIS_URL=redis://host:port/db, or install redis-server so the demo can start its own:\n"
    "  Debian/Ubuntu: sudo apt-get install redis-server\n"
    "  Fedora/RHEL:   sudo dnf install redis\n"
    "  macOS:         brew install redis"
)


class DemoError(Exception):
    """A problem the person running the demo can fix; the message says how."""


class AdminCredentials(msgspec.Struct, frozen=True):
    username: str
    password: str
    api_token: str


class Seeded(msgspec.Struct, frozen=True):
    """What ``manage.py seed_demo`` prints on stdout, as one JSON document, for the launcher."""

    admin: AdminCredentials
    fleet_nodes: int  # how many of FLEET_HOSTNAMES exist and have a credential in the fleet's file


# --- Settings --------------------------------------------------------------------------------------


def demo_environment(environ: Mapping[str, str], *, var_dir: Path, redis_url: str, agent_ws_url: str) -> dict[str, str]:
    """The environment of the demo's children: ``environ`` plus development-safe defaults.

    Values already in ``environ`` win, except ``DATABASE_URL``: the demo always uses the embedded
    SQLite database under ``var_dir``, so it can never migrate or seed a real database by accident;
    and ``AGENT_WS_URL``, which is the demo's own gateway (``agent_ws_url``), handed to the agents it
    enrolls. DEBUG stays off (the demo runs the production code paths) and the secret key lives in a
    file generated on first start. The channel layer's and Celery's Redis keys start with a prefix of
    this var directory's own.
    """
    environment = {name: value for name, value in environ.items() if name != "DATABASE_URL"}
    environment["AGENT_WS_URL"] = agent_ws_url
    if "SECRET_KEY" not in environment:
        environment.setdefault("SECRET_KEY_FILE", str(var_dir / "secret_key"))
    key_prefix = redis_key_prefix(var_dir)
    defaults = {
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "CONTROLPLANE_VAR_DIR": str(var_dir),
        "DEBUG": "false",
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback
        "SECURE_COOKIES": "false",
        "ALLOWED_HOSTS": "localhost,127.0.0.1",
        "REDIS_URL": redis_url,
        "CHANNEL_LAYER_PREFIX": key_prefix,
        "CELERY_KEY_PREFIX": f"{key_prefix}:",
        "PYTHONUNBUFFERED": "1",  # children's lines reach the console as they are written
        "BURNIN_ON_ENROLLMENT": "quick",  # a new node burns in when its agent first comes online
        # 16 nodes: at 10 % the breaker would let one be quarantined; the demo scripts two bad ones.
        "QUARANTINE_BREAKER_PERCENT": "25",
    }
    for name, value in defaults.items():
        environment.setdefault(name, value)
    return environment


def redis_key_prefix(var_dir: Path) -> str:
    """The demo's own Redis key prefix: one demo, one var directory (its database, its secret key)."""
    return "demo-" + hashlib.sha256(str(var_dir.resolve()).encode()).hexdigest()[:12]


def var_directory(environ: Mapping[str, str]) -> Path:
    """Where the demo keeps its state; the same rule as ``VAR_DIR`` in settings."""
    return Path(environ.get("CONTROLPLANE_VAR_DIR", BASE_DIR / "var"))


def ensure_secret_key(path: Path) -> None:
    """Create a random secret key readable by this user only, once; later starts reuse it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(descriptor, "w") as key_file:
        key_file.write(secrets.token_urlsafe(50))


def server_port(environ: Mapping[str, str]) -> int:
    value = environ.get("PORT", str(DEFAULT_PORT))
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise DemoError(f"PORT={value!r} is not a TCP port number (1-65535).")
    return int(value)


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def agent_socket_url(port: int) -> str:
    """The agents' socket on the demo's agent gateway."""
    return f"ws://{HOST}:{port}/ws/agent"


def is_listening(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=0.5).close()
    except OSError:
        return False
    return True


# --- Redis -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UseRedis:
    url: str
    description: str


@dataclass(frozen=True)
class StartRedis:
    executable: str


def choose_redis(
    environ: Mapping[str, str], *, local_redis_answers: Callable[[], bool], redis_server: str | None
) -> UseRedis | StartRedis:
    """REDIS_URL when set, else the local Redis on the default port, else a private one we start."""
    if environ.get("REDIS_URL"):
        return UseRedis(environ["REDIS_URL"], "REDIS_URL from the environment")
    if local_redis_answers():
        return UseRedis(LOCAL_REDIS_URL, f"the local Redis, database {DEMO_REDIS_DB}; the tests use 0")
    if redis_server:
        return StartRedis(redis_server)
    raise DemoError(REDIS_INSTALL_HINT)


def redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def provide_redis(environ: Mapping[str, str], supervisor: Supervisor) -> UseRedis:
    """The Redis the demo uses: one that answers already, or a private redis-server it starts."""
    choice = choose_redis(
        environ,
        local_redis_answers=lambda: redis_answers(LOCAL_REDIS_URL),
        redis_server=shutil.which("redis-server"),
    )
    if isinstance(choice, UseRedis):
        return choice
    port = free_loopback_port()
    url = f"redis://{HOST}:{port}/0"
    argv = [choice.executable, "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no"]
    supervisor.start("redis", argv, environ, stop_last=True)
    try:
        supervisor.wait_until(lambda: redis_answers(url), timeout_s=REDIS_START_TIMEOUT_S)
    except (ChildExited, TimeoutError):
        raise DemoError(f"redis-server did not start (see its output above); it should answer on {url}.") from None
    return UseRedis(url, "started by the demo, nothing saved to disk")


# --- The processes ---------------------------------------------------------------------------------


def seed(supervisor: Supervisor, env: Mapping[str, str], var_dir: Path) -> Seeded:
    """Prepare the database and the fleet's credentials (``manage.py seed_demo``, in a child)."""
    argv = [sys.executable, "manage.py", "seed_demo", "--agent-ws-url", env["AGENT_WS_URL"]]
    argv += ["--fleet-credentials-file", str(var_dir / FLEET_CREDENTIALS_FILE)]
    try:
        output = supervisor.run_to_end("setup", argv, env)
    except subprocess.CalledProcessError:
        raise DemoError("preparing the database failed; its output above says why") from None
    try:
        return msgspec.json.decode(output, type=Seeded)
    except msgspec.DecodeError as error:
        raise DemoError(f"seed_demo answered {output[:200]!r}, not its JSON document: {error}") from None


def start_application(supervisor: Supervisor, env: Mapping[str, str], port: int, agent_port: int) -> None:
    """The ASGI server, the agent gateway, a Celery worker consuming every queue, and Celery beat."""
    python = sys.executable
    # The lifespan (controlplane/lifespan.py) starts the process's parts and, at a stop, lets the
    # ingestor write what is pending before the server exits.
    for name, application, listen_on in (("web", "application", port), ("gateway", "agent_gateway", agent_port)):
        server = ["uvicorn", f"controlplane.asgi:{application}", "--host", HOST, "--port", str(listen_on)]
        supervisor.start(name, [python, "-m", *server, "--lifespan", "on"], env)
    celery = [python, "-m", "celery", "-A", "controlplane"]
    # Without -Q the worker consumes every queue declared in CELERY_TASK_QUEUES.
    supervisor.start("worker", [*celery, "worker", "--concurrency", "2", "--loglevel", "INFO"], env)
    supervisor.start("beat", [*celery, "beat", "--loglevel", "INFO"], env)


def wait_until_listening(supervisor: Supervisor, port: int) -> None:
    try:
        supervisor.wait_until(lambda: is_listening(port), timeout_s=READY_TIMEOUT_S)
    except TimeoutError:
        raise DemoError(f"the server did not listen on port {port} within {READY_TIMEOUT_S} s") from None


def start_fleet(supervisor: Supervisor, env: Mapping[str, str], server_url: str, var_dir: Path, nodes: int) -> None:
    """The simulated fleet: the real node agent on simulated GPUs, one WebSocket per node.

    Started once both servers answer, so that no agent's first connection is refused. Its agents
    connect to the agent gateway, as the credentials file says (``server_url`` is for enrolling).
    """
    if not nodes:
        supervisor.say("simulated fleet: none of the example nodes exist; running without a fleet")
        return
    simulate = [sys.executable, "-m", "agents.cli", "simulate", "--server", server_url]
    simulate += ["--credentials-file", str(var_dir / FLEET_CREDENTIALS_FILE), "--nodes", str(nodes)]
    simulate += ["--profile", FLEET_PROFILE, "--seed", str(FLEET_SEED), "--faults", FLEET_FAULTS]
    supervisor.start("fleet", simulate, env)


def banner(url: str, credentials: AdminCredentials, redis: UseRedis, env: Mapping[str, str]) -> str:
    rule = "=" * 78
    return "\n".join(
        [
            rule,
            f"  GPU control plane demo is running at {url}/",
            "",
            f"  Dashboard: {url}/   user {credentials.username}   password {credentials.password}",
            f"  Admin:     {url}/admin/   (the same account)",
            f"  API docs:  {url}/api/docs/",
            f"  API token: {credentials.api_token}   (role admin)",
            f"             curl -H 'Authorization: Bearer {credentials.api_token}' {url}/api/v1/nodes",
            f"  Agents:    {env['AGENT_WS_URL']}   (the agent gateway, a process of its own)",
            "",
            f"  Database:  {Path(env['CONTROLPLANE_VAR_DIR']) / 'controlplane.sqlite3'}",
            f"  Redis:     {redis.url} ({redis.description})",
            f"             keys {env['CHANNEL_LAYER_PREFIX']}… (channel layer), {env['CELERY_KEY_PREFIX']}… (Celery)",
            "  The password and token are new on every start. Ctrl-C stops everything.",
            rule,
        ]
    )


# --- The launcher ----------------------------------------------------------------------------------


def run(environ: Mapping[str, str], output: TextIO) -> int:
    """Set up and supervise the demo until a stop signal (status 0) or a child's death (status 1)."""
    port = server_port(environ)
    if not port_is_free(HOST, port):
        raise DemoError(f"port {port} on {HOST} is in use (is another demo running?); choose another with PORT=…")
    supervisor = Supervisor(output, cwd=BASE_DIR, colour=output.isatty() and "NO_COLOR" not in environ)
    return supervisor.run(lambda: start_demo(supervisor, environ, port), label="the demo")


def start_demo(supervisor: Supervisor, environ: Mapping[str, str], port: int) -> None:
    """Redis, the database, the application, and once it answers, the banner and the fleet."""
    var_dir = var_directory(environ)
    url = f"http://{HOST}:{port}"
    agent_port = free_loopback_port()
    if environ.get("DATABASE_URL"):
        supervisor.say("DATABASE_URL is ignored: the demo always uses its own SQLite database under var/")
    redis = provide_redis(environ, supervisor)
    env = demo_environment(environ, var_dir=var_dir, redis_url=redis.url, agent_ws_url=agent_socket_url(agent_port))
    if env.get("SECRET_KEY_FILE") == str(var_dir / "secret_key"):
        ensure_secret_key(var_dir / "secret_key")
    seeded = seed(supervisor, env, var_dir)
    start_application(supervisor, env, port, agent_port)
    for listening in (port, agent_port):
        wait_until_listening(supervisor, listening)
    supervisor.say(banner(url, seeded.admin, redis, env))
    start_fleet(supervisor, env, url, var_dir, seeded.fleet_nodes)


def main() -> None:
    try:
        status = run(dict(os.environ), sys.stdout)
    except DemoError as error:
        print(f"demo: {error}", file=sys.stderr)
        status = 2
    sys.exit(status)


if __name__ == "__main__":
    main()
