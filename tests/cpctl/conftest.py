"""cpctl against a live server: uvicorn in a thread of the test process (so it sees the test
database), the real Redis channel layer, and API tokens of each role. ``cpctl(...)`` runs the command
line in this process and gives back its exit code and what it printed."""

import io
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from django.db import DEFAULT_DB_ALIAS, connections

from apps.accounts.models import ApiToken, User
from apps.accounts.roles import Role
from controlplane.celery import app as celery_app
from cpctl.cli import main
from tests.dashboard.conftest import LiveServer, asgi_server  # noqa: F401 (the fixture)


@dataclass
class Result:
    code: int
    out: str
    err: str


class Terminal(io.StringIO):
    """What cpctl writes to a terminal: it asks ``isatty()``."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _tasks_run_where_they_are_queued() -> Iterator[None]:
    """Runs start when their launch commits, inside the server's request, with the real task code."""
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture(autouse=True)
def _connections_closed_after_each_request(monkeypatch) -> None:
    """Each HTTP request runs on a thread of its own, whose database connection would outlive it (and keep
    the test database from being dropped) unless closed when the request finishes."""
    monkeypatch.setitem(connections.settings[DEFAULT_DB_ALIAS], "CONN_MAX_AGE", 0)


@pytest.fixture
def tokens(transactional_db) -> dict[str, str]:
    issued = {}
    for role in (Role.VIEWER, Role.OPERATOR):
        user = User.objects.create(username=f"cli-{role}", role=role)
        issued[role] = ApiToken.issue(user=user, name="cpctl", role=role)[1]
    return issued


Cpctl = Callable[..., Result]


@pytest.fixture
def cpctl(
    asgi_server: LiveServer,  # noqa: F811
    tokens: dict[str, str],
) -> Cpctl:
    """``cpctl("nodes", "list", role="viewer", tty=False, env=None)``."""

    def run(*argv: str, role: str = Role.OPERATOR, tty: bool = False, env: dict[str, str] | None = None) -> Result:
        out, err = (Terminal() if tty else io.StringIO()), io.StringIO()
        environment = {"CPCTL_URL": asgi_server.origin, "CPCTL_TOKEN": tokens[role]} if env is None else env
        code = main(list(argv), env=environment, stdout=out, stderr=err)
        return Result(code, out.getvalue(), err.getvalue())

    return run


class Background:
    """cpctl on a thread of its own (``--wait``, ``--follow``), while the test plays the agents."""

    def __init__(self, cpctl: Cpctl, *argv: str, **options: object) -> None:
        self.result: Result | None = None
        self._thread = threading.Thread(target=self._run, args=(cpctl, argv, options), name="cpctl")
        self._thread.start()

    def _run(self, cpctl: Cpctl, argv: tuple[str, ...], options: dict[str, object]) -> None:
        self.result = cpctl(*argv, **options)

    def running(self) -> bool:
        return self._thread.is_alive()

    def pause(self) -> None:
        """A moment for cpctl's thread (it polls), between the test's own steps."""
        self._thread.join(timeout=0.05)

    def join(self) -> Result:
        self._thread.join(timeout=60)
        assert self.result is not None, "cpctl did not finish within 60 s"
        return self.result
