"""Django on a throwaway PostgreSQL database, for benchmarks: created (and migrated) next to the
database ``DATABASE_URL`` names, never that database itself, and dropped afterwards unless kept."""

import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def scratch_postgresql(name: str, *, keep: bool = False) -> Iterator[None]:
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        sys.exit("DATABASE_URL must name a PostgreSQL server, e.g. postgres://postgres@127.0.0.1:5432/postgres")
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    os.environ["TEST_DATABASE_NAME"] = name
    import django

    django.setup()
    from django.db import connection

    original = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=not keep, serialize=False, keepdb=keep)
    try:
        yield
    finally:
        if not keep:
            connection.creation.destroy_test_db(original, verbosity=0)
