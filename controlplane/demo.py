"""``make demo``: the whole product on one machine, with nothing to configure.

Fills in development-safe settings, finds or starts a Redis, prepares the embedded SQLite database
(migrations, static files, the example inventory, an admin account with a fresh password), then runs
the ASGI server, a Celery worker, Celery beat and the simulated fleet as child processes. Each child's
output is prefixed with its name. Ctrl-C or SIGTERM stops them all; if one dies, the rest are stopped
and the launcher exits non-zero.

The demo never touches what the tests use: its database is the SQLite file under ``var/`` (an inherited
``DATABASE_URL`` is ignored), and on a Redis it finds on 127.0.0.1:6379 it uses database 1, leaving 0
to the tests.
"""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TextIO

import msgspec

BASE_DIR = Path(__file__).resolve().parent.parent
EXAMPLE_INVENTORY = BASE_DIR / "examples" / "inventory" / "h100-16node.yaml"

HOST = "127.0.0.1"  # loopback only: the demo admin's password is printed on the console
DEFAULT_PORT = 8000
DEMO_REDIS_DB = 1  # the tests use database 0 of the same local Redis
LOCAL_REDIS_URL = f"redis://127.0.0.1:6379/{DEMO_REDIS_DB}"
ADMIN_USERNAME = "admin"
ADMIN_TOKEN_NAME = "demo"

# The simulated fleet is the example inventory's nodes: the file carries these nodes' simulated
# identities (profile and seed), so they connect without a single "GPU swapped".
FLEET_HOSTNAMES = tuple(f"gpu-{number:03d}" for number in range(1, 17))
FLEET_NODES = len(FLEET_HOSTNAMES)
FLEET_PROFILE = "h100"
FLEET_SEED = 1
FLEET_CREDENTIALS_FILE = "fleet-credentials.json"  # under the var directory
# Alive but sane: a straggler from the start, one GPU overheating for five minutes after a minute,
# one falling off the bus after two.
FLEET_FAULTS = "gpu-005:straggler:gpu3 gpu-009:thermal@60+300:gpu6 gpu-012:xid79@120:gpu2"

READY_TIMEOUT_S = 90
STOP_TIMEOUT_S = 10
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REDIS_INSTALL_HINT = (
    "The demo needs Redis (channel layer and Celery broker). Either start one on 127.0.0.1:6379, set "
    "REDIS_URL=redis://host:port/db, or install redis-server so the demo can start its own:\n"
    "  Debian/Ubuntu: sudo apt-get install redis-server\n"
    "  Fedora/RHEL:   sudo dnf install redis\n"
    "  macOS:         brew install redis"
)


class DemoError(Exception):
    """A problem the person running the demo can fix; the message says how."""


# --- Settings --------------------------------------------------------------------------------------


def demo_environment(environ: Mapping[str, str], *, var_dir: Path, redis_url: str) -> dict[str, str]:
    """The environment for the demo's setup and children: ``environ`` plus development-safe defaults.

    Values already in ``environ`` win, except ``DATABASE_URL``: the demo always uses the embedded
    SQLite database under ``var_dir``, so it can never migrate or seed a real database by accident.
    DEBUG stays off (the demo runs the production code paths) and the secret key lives in a file
    generated on first start.
    """
    environment = {name: value for name, value in environ.items() if name != "DATABASE_URL"}
    if "SECRET_KEY" not in environment:
        environment.setdefault("SECRET_KEY_FILE", str(var_dir / "secret_key"))
    defaults = {
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "CONTROLPLANE_VAR_DIR": str(var_dir),
        "DEBUG": "false",
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP on loopback
        "SECURE_COOKIES": "false",
        "ALLOWED_HOSTS": "localhost,127.0.0.1",
        "REDIS_URL": redis_url,
        "PYTHONUNBUFFERED": "1",  # children's lines reach the console as they are written
    }
    for name, value in defaults.items():
        environment.setdefault(name, value)
    return environment


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


def wait_for_redis(url: str, process: subprocess.Popen[bytes], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not redis_answers(url):
        if process.poll() is not None or time.monotonic() > deadline:
            raise DemoError(f"redis-server did not start (see its output above); it should answer on {url}.")
        time.sleep(0.1)


# --- Child processes -------------------------------------------------------------------------------

_COLOURS = ("36", "33", "35", "32", "34", "31")


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    stop_last: bool
    relay: threading.Thread = field(repr=False)


class Supervisor:
    """Runs named children, relays their output line by line with a name prefix, stops them all.

    Each child gets its own process group, so a Ctrl-C in the terminal reaches only the launcher,
    which then stops the children in order: the application first, the Redis it depends on last.
    """

    def __init__(self, output: TextIO, *, colour: bool = False) -> None:
        self.output = output
        self.colour = colour
        self.children: list[Child] = []
        self._output_lock = threading.Lock()

    def start(self, name: str, argv: list[str], env: Mapping[str, str], *, stop_last: bool = False) -> Child:
        process = subprocess.Popen(
            argv,
            env=dict(env),
            cwd=BASE_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        assert process.stdout is not None  # stdout=PIPE
        prefix = self._prefix(name, len(self.children))
        relay = threading.Thread(target=self._relay, args=(prefix, process.stdout), name=f"relay-{name}", daemon=True)
        relay.start()
        child = Child(name, process, stop_last, relay)
        self.children.append(child)
        return child

    def say(self, message: str) -> None:
        with self._output_lock:
            print(message, file=self.output, flush=True)

    def first_exited(self) -> Child | None:
        return next((child for child in self.children if child.process.poll() is not None), None)

    def stop_all(self) -> None:
        """SIGTERM, a grace period, then SIGKILL: the application's processes first, then the rest."""
        self._stop([child for child in self.children if not child.stop_last])
        self._stop([child for child in self.children if child.stop_last])

    def _stop(self, children: list[Child]) -> None:
        running = [child for child in children if child.process.poll() is None]
        for child in running:
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in running:
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"{child.name} did not stop within {STOP_TIMEOUT_S} s; killing it")
                os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()
        for child in children:
            child.relay.join(timeout=2)

    def _prefix(self, name: str, index: int) -> str:
        label = f"{name:>6} |"
        return f"\033[{_COLOURS[index % len(_COLOURS)]}m{label}\033[0m" if self.colour else label

    def _relay(self, prefix: str, stream: IO[bytes]) -> None:
        for raw_line in iter(stream.readline, b""):
            self.say(f"{prefix} {raw_line.decode(errors='replace').rstrip()}")
        stream.close()


# --- Preparing the database ------------------------------------------------------------------------


@dataclass(frozen=True)
class AdminCredentials:
    username: str
    password: str
    api_token: str


def prepare_database(say: Callable[[str], None]) -> AdminCredentials:
    """Migrate, collect static files, import the example inventory once, reset the admin account.

    Runs in the launcher's process with the demo environment already in ``os.environ``.
    """
    import django
    from django.core.management import call_command, get_commands

    django.setup()
    from apps.inventory.models import Cluster

    say("applying database migrations")
    call_command("migrate", interactive=False, verbosity=0)
    say("collecting static files")
    call_command("collectstatic", interactive=False, verbosity=0)
    if not EXAMPLE_INVENTORY.exists():
        say(f"example inventory: {EXAMPLE_INVENTORY.relative_to(BASE_DIR)} is not there yet; starting empty")
    elif "import_inventory" not in get_commands():
        say("example inventory: the import_inventory command is not available yet; starting empty")
    elif Cluster.objects.exists():
        say("example inventory: the database already holds clusters; leaving them as they are")
    else:
        say(f"importing the example inventory {EXAMPLE_INVENTORY.relative_to(BASE_DIR)}")
        call_command("import_inventory", str(EXAMPLE_INVENTORY))
        seed_example_prices(say)
    return reset_admin()


# The price book of the demo's fleet, so its dashboard shows costs; illustrative, and labelled so.
EXAMPLE_GPU_HOUR_USD = "2.49"  # on demand, per H100 GPU-hour
EXAMPLE_KWH_USD = "0.12"
EXAMPLE_PUE = "1.30"
EXAMPLE_PRICE_NOTE = "Example price from the demo (controlplane/demo.py), not a quote."


def seed_example_prices(say: Callable[[str], None]) -> None:
    from decimal import Decimal

    from django.utils import timezone

    from apps.costs.choices import PriceKind
    from apps.costs.models import EnergyPrice, GpuPrice
    from apps.inventory.models import Cluster, NodeType

    since = timezone.localdate().replace(day=1)
    for node_type in NodeType.objects.filter(nodes__isnull=False).distinct():
        GpuPrice.objects.create(
            node_type=node_type,
            kind=PriceKind.ON_DEMAND,
            hourly_price_per_gpu=Decimal(EXAMPLE_GPU_HOUR_USD),
            valid_from=since,
            notes=EXAMPLE_PRICE_NOTE,
        )
    for cluster in Cluster.objects.all():
        EnergyPrice.objects.create(
            cluster=cluster,
            price_per_kwh=Decimal(EXAMPLE_KWH_USD),
            pue=Decimal(EXAMPLE_PUE),
            valid_from=since,
            notes=EXAMPLE_PRICE_NOTE,
        )
    say(f"example prices: ${EXAMPLE_GPU_HOUR_USD}/GPU-hour on demand, ${EXAMPLE_KWH_USD}/kWh at PUE {EXAMPLE_PUE}")


def close_database_connections() -> None:
    """The launcher is done with the database: the children must not inherit its connections."""
    from django.db import connections

    connections.close_all()


def reset_admin() -> AdminCredentials:
    """Create or reset the ``admin`` account with a fresh password and a fresh API token, both audited."""
    from django.db import transaction

    from apps.accounts.audit import record
    from apps.accounts.models import ApiToken, User
    from apps.accounts.roles import Role

    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        admin, created = User.objects.get_or_create(username=ADMIN_USERNAME)
        admin.role = Role.ADMIN
        admin.is_staff = admin.is_superuser = admin.is_active = True
        admin.set_password(password)
        admin.save()
        record("user.create" if created else "user.reset_password", actor="system:demo", obj=admin)
        ApiToken.objects.filter(user=admin, name=ADMIN_TOKEN_NAME).delete()
        token, secret = ApiToken.issue(user=admin, name=ADMIN_TOKEN_NAME, role=Role.ADMIN)
        record("api_token.create", actor="system:demo", obj=token, owner=admin.username, role=token.role)
    return AdminCredentials(ADMIN_USERNAME, password, secret)


# --- The processes ---------------------------------------------------------------------------------


def issue_fleet_credentials(path: Path, server_url: str, say: Callable[[str], None]) -> int:
    """Give each example node a fresh credential for the simulated fleet; return how many got one.

    The demo is a trusted local launcher with the database at hand, so it issues the credentials
    server-side instead of enrolling: the credentials the previous start issued (those no enrollment
    token produced) are revoked, the new ones written to ``path`` (0600) in the format
    ``cp-agent simulate --credentials-file`` reads. Both are audited.
    """
    from django.db import transaction

    from agents.config import FleetCredentials, SimulatedNodeCredential, websocket_url
    from agents.durable import write_private_file
    from apps.accounts.audit import record
    from apps.gateway.models import NodeCredential
    from apps.inventory.models import Node

    fleet = FleetCredentials(server_ws_url=websocket_url(server_url))
    with transaction.atomic():
        nodes = sorted(Node.objects.filter(hostname__in=FLEET_HOSTNAMES), key=lambda node: node.hostname)
        previous = NodeCredential.objects.usable().filter(node__in=nodes, enrollment_token__isnull=True)
        for credential in previous.select_related("node"):
            credential.revoke()
            record("node_credential.revoke", actor="system:demo", obj=credential, hostname=credential.node.hostname)
        for node in nodes:
            credential, secret = NodeCredential.issue(node)
            record("node_credential.issue", actor="system:demo", obj=credential, hostname=node.hostname)
            fleet.nodes.append(SimulatedNodeCredential(node.hostname, node.pk, secret))
    write_private_file(path, msgspec.json.format(msgspec.json.encode(fleet), indent=2) + b"\n")
    if len(nodes) < FLEET_NODES:
        say(f"simulated fleet: {len(nodes)} of the example nodes {FLEET_HOSTNAMES[0]}..{FLEET_HOSTNAMES[-1]} exist")
    return len(nodes)


def start_fleet_simulator(
    supervisor: Supervisor, env: Mapping[str, str], server_url: str, credentials_file: Path, nodes: int
) -> None:
    """Start the simulated fleet: the real node agent on simulated GPUs, one WebSocket per node."""
    if not nodes:
        supervisor.say("simulated fleet: none of the example nodes exist; running without a fleet")
        return
    simulate = [sys.executable, "-m", "agents.cli", "simulate", "--server", server_url]
    simulate += ["--credentials-file", str(credentials_file), "--nodes", str(nodes)]
    simulate += ["--profile", FLEET_PROFILE, "--seed", str(FLEET_SEED), "--faults", FLEET_FAULTS]
    supervisor.start("fleet", simulate, env)


def start_application(supervisor: Supervisor, env: Mapping[str, str], port: int, fleet_nodes: int) -> None:
    python = sys.executable
    server = ["uvicorn", "controlplane.asgi:application", "--host", HOST, "--port", str(port)]
    supervisor.start("web", [python, "-m", *server, "--lifespan", "off"], env)  # Django has no lifespan handlers
    celery = [python, "-m", "celery", "-A", "controlplane"]
    # Without -Q the worker consumes every queue declared in CELERY_TASK_QUEUES.
    supervisor.start("worker", [*celery, "worker", "--concurrency", "2", "--loglevel", "INFO"], env)
    supervisor.start("beat", [*celery, "beat", "--loglevel", "INFO"], env)
    credentials_file = var_directory(env) / FLEET_CREDENTIALS_FILE
    start_fleet_simulator(supervisor, env, f"http://{HOST}:{port}", credentials_file, fleet_nodes)


def wait_until_listening(port: int, supervisor: Supervisor) -> bool:
    """True once the server accepts connections; False if a child died first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while supervisor.first_exited() is None:
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return True
        except OSError:
            if time.monotonic() > deadline:
                raise DemoError(f"the server did not listen on port {port} within {READY_TIMEOUT_S} s") from None
            time.sleep(0.2)
    return False


def banner(url: str, credentials: AdminCredentials, redis_description: str, var_dir: Path) -> str:
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
            "",
            f"  Database:  {var_dir / 'controlplane.sqlite3'}",
            f"  Redis:     {redis_description}",
            "  The password and token are new on every start. Ctrl-C stops everything.",
            rule,
        ]
    )


def start_redis(choice: UseRedis | StartRedis, supervisor: Supervisor, environ: Mapping[str, str]) -> UseRedis:
    if isinstance(choice, UseRedis):
        return choice
    port = free_loopback_port()
    url = f"redis://{HOST}:{port}/0"
    redis = supervisor.start(
        "redis",
        [choice.executable, "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no"],
        environ,
        stop_last=True,
    )
    wait_for_redis(url, redis.process)
    return UseRedis(url, "started by the demo, nothing saved to disk")


def run(environ: Mapping[str, str], output: TextIO) -> int:
    """Set up and supervise the demo until a stop signal (status 0) or a child's death (status 1)."""
    supervisor = Supervisor(output, colour=output.isatty() and "NO_COLOR" not in environ)
    port = server_port(environ)
    if not port_is_free(HOST, port):
        raise DemoError(f"port {port} on {HOST} is in use (is another demo running?); choose another with PORT=…")
    var_dir = var_directory(environ)
    if environ.get("DATABASE_URL"):
        supervisor.say("DATABASE_URL is ignored: the demo always uses its own SQLite database under var/")

    previous_handlers = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    try:
        for number in STOP_SIGNALS:  # all three interrupt like Ctrl-C, in setup as in supervision
            signal.signal(number, signal.default_int_handler)
        choice = choose_redis(
            environ,
            local_redis_answers=lambda: redis_answers(LOCAL_REDIS_URL),
            redis_server=shutil.which("redis-server"),
        )
        redis = start_redis(choice, supervisor, environ)
        env = demo_environment(environ, var_dir=var_dir, redis_url=redis.url)
        if env.get("SECRET_KEY_FILE") == str(var_dir / "secret_key"):
            ensure_secret_key(var_dir / "secret_key")
        os.environ.clear()
        os.environ.update(env)
        credentials = prepare_database(supervisor.say)
        fleet_nodes = issue_fleet_credentials(var_dir / FLEET_CREDENTIALS_FILE, f"http://{HOST}:{port}", supervisor.say)

        start_application(supervisor, env, port, fleet_nodes)
        if wait_until_listening(port, supervisor):
            supervisor.say(banner(f"http://{HOST}:{port}", credentials, f"{redis.url} ({redis.description})", var_dir))
        while (exited := supervisor.first_exited()) is None:
            time.sleep(0.5)
        supervisor.say(f"{exited.name} exited with status {exited.process.returncode}; stopping the demo")
        return 1
    except KeyboardInterrupt:
        supervisor.say("stopping the demo")
        return 0
    finally:
        for number in STOP_SIGNALS:  # a second Ctrl-C must not cut the children's shutdown short
            signal.signal(number, signal.SIG_IGN)
        supervisor.stop_all()
        for number, handler in previous_handlers.items():
            signal.signal(number, handler)


def main() -> None:
    try:
        status = run(dict(os.environ), sys.stdout)
    except DemoError as error:
        print(f"demo: {error}", file=sys.stderr)
        status = 2
    sys.exit(status)


if __name__ == "__main__":
    main()
