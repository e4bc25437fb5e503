"""Data built once for a whole test module, for suites whose tests only read it (or change it inside
their own transaction, which pytest-django rolls back to a savepoint)."""

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction


@contextmanager
def rolled_back_afterwards(django_db_blocker) -> Iterator[None]:
    """Open the database to a module-scoped fixture; whatever it writes is rolled back when it ends."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield
        transaction.set_rollback(True)
