"""DATABASES from ``DATABASE_URL``: PostgreSQL in production and CI, SQLite (a file, in WAL mode) for
the one-command demo and its tests. Read when settings.py calls it, so a settings module run again
(tests/test_settings.py) reads the environment again."""

from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from controlplane.env import env_bool, env_int, env_raw

SQLITE = "django.db.backends.sqlite3"
POOL_TIMEOUT_S = 10  # a connection is waited for this long, then the request fails


def databases(url: str, var_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        default = dj_database_url.parse(url, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0))
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from exc
    if default["ENGINE"] == SQLITE:
        # Several processes (server, worker, beat) share one SQLite file: WAL and a busy timeout keep
        # writers from failing with "database is locked".
        default["CONN_MAX_AGE"] = 0
        default["OPTIONS"] = {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    elif env_bool("DATABASE_POOL", True):
        # Under ASGI every request runs on a thread of its own (controlplane/http.py), whose connection
        # would be new however long connections may live: a PostgreSQL backend started for each page
        # view, its catalog caches cold for its first queries (a fleet page under benchmarks/dashboard.py
        # spent 12-180 ms connecting). Django's pool lends warm ones; a connection it "closes" goes
        # back, so they are closed after every request and every database_sync_to_async call.
        max_size = env_int("DATABASE_POOL_MAX_SIZE", 20, minimum=1)
        default["CONN_MAX_AGE"] = 0
        default.setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(env_int("DATABASE_POOL_MIN_SIZE", 2, minimum=0), max_size),
            "max_size": max_size,
            "timeout": POOL_TIMEOUT_S,
        }
    default["TEST"] = {"NAME": env_raw("TEST_DATABASE_NAME")}
    if default["ENGINE"] == SQLITE and not default["TEST"]["NAME"]:
        # Tests on SQLite use a file, as the demo does, not Django's default in-memory database: that one is
        # shared between threads through SQLite's shared cache, whose table locks fail a writer at once
        # ("database table is locked") while another thread reads, which the product's threads (the change
        # publisher, the gateway's database thread) do all the time. A file in WAL mode lets them read
        # while one writes, with the busy timeout above. (pytest-xdist gives each worker its own file.)
        var_dir.mkdir(parents=True, exist_ok=True)  # a fresh clone has none before its first demo
        default["TEST"]["NAME"] = str(var_dir / "test.sqlite3")
    return {"default": default}
