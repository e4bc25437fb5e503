"""Nothing is lost when a process dies: the whole product as separate processes (stack.py), a run of
three nodes and four steps, and in the middle of it the Celery worker killed with SIGKILL (with its
pool) and started again, the ASGI server restarted, and Redis killed and started again empty. The run
completes, and every command ran exactly once: the stand-in check writes each run down as it starts."""

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from tests.jobs.stack import Stack

NODES, STEPS, STEP_S = 3, 4, 4.0
FINISH_TIMEOUT_S = 240

pytestmark = [
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to restart a Redis of its own"),
    pytest.mark.timeout(600),
]


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A database of the stack's own: a SQLite file, or a scratch PostgreSQL database on the test server."""
    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.postgresql":
        yield f"sqlite:///{tmp_path / 'stack.sqlite3'}"
        return
    name = f"{database['TEST']['NAME'] or 'test_' + database['NAME']}_faults"
    server = {"host": database["HOST"], "port": database["PORT"], "user": database["USER"]}
    with psycopg.connect(dbname="postgres", password=database["PASSWORD"] or None, autocommit=True, **server) as pg:
        pg.execute(f'DROP DATABASE IF EXISTS "{name}"')
        pg.execute(f'CREATE DATABASE "{name}"')
    password = f":{database['PASSWORD']}" if database["PASSWORD"] else ""
    yield f"postgres://{database['USER']}{password}@{database['HOST']}:{database['PORT']}/{name}"
    with psycopg.connect(dbname="postgres", password=database["PASSWORD"] or None, autocommit=True, **server) as pg:
        pg.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def stack(tmp_path: Path, database_url: str) -> Iterator[Stack]:
    running = Stack(tmp_path, nodes=NODES, database_url=database_url)
    try:
        running.start()
        yield running
    finally:
        running.stop()


def wait_for(stack: Stack, what: str, condition: Callable[[], Any], timeout: float = FINISH_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            commands = stack.get_or_none("/api/v1/commands?limit=1000") or {"results": []}
            states = [(c["node"]["hostname"], c["sequence"], c["state"], c["attempts"]) for c in commands["results"]]
            parts = "\n".join(f"--- {name}:\n{stack.output(name)}" for name in stack.processes)
            pytest.fail(
                f"not {what} after {timeout} s; {stack.liveness()}; commands {states}; ran {stack.runs()}\n{parts}"
            )
        time.sleep(0.25)
    return result


def step_started(stack: Stack, sequence: int) -> bool:
    """Every node's command of that step has started on its agent (the stand-in wrote it down)."""
    return len(stack.runs()) >= NODES * (sequence + 1)


def test_a_run_survives_a_killed_worker_a_restarted_server_and_a_restarted_redis(stack):
    node_ids = [str(node["node_id"]) for node in stack.nodes]
    wait_for(stack, "every node online", lambda: len(online(stack)) == NODES, timeout=120)
    run = stack.admin("launch", "--nodes", *node_ids, "--steps", str(STEPS), "--sleep", str(STEP_S),
                      "--marker", str(stack.marker))["run"]  # fmt: skip

    wait_for(stack, "the first step started", lambda: step_started(stack, 0))
    stack.kill("worker")  # SIGKILL, pool and all, with tasks taken and not acknowledged
    time.sleep(1)
    stack.start_worker()

    wait_for(stack, "the second step started", lambda: step_started(stack, 1))
    stack.restart_server()

    wait_for(stack, "the third step started", lambda: step_started(stack, 2))
    stack.restart_redis()

    finished = wait_for(stack, "the run over", lambda: over(stack, run))
    commands = stack.get(f"/api/v1/commands?run={run}&limit=1000")["results"]
    assert finished["state"] == "succeeded", finished["reason"]
    assert sorted(stack.runs()) == sorted(c["key"] for c in commands)  # each command ran exactly once
    assert len(commands) == NODES * STEPS


def online(stack: Stack) -> list[dict[str, Any]]:
    nodes = stack.get_or_none("/api/v1/nodes?liveness=online") or {"results": []}
    return nodes["results"]


def over(stack: Stack, run: int) -> dict[str, Any] | None:
    body = stack.get_or_none(f"/api/v1/runs/{run}")
    return body if body and body["state"] in ("succeeded", "failed", "cancelled") else None
