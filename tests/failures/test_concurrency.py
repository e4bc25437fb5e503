"""Two consumers recording the same condition at the same moment still make one failure.

PostgreSQL only: SQLite serialises writers (every transaction begins IMMEDIATE), so the race
cannot happen there."""

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from apps.failures import recording
from apps.failures.events import record_event
from apps.failures.models import Failure
from tests.failures.conftest import xid

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="SQLite serialises writers; no race to test"),
]


def in_threads(count: int, work: Callable[[], object]) -> list[object]:
    def run() -> object:
        try:
            return work()
        finally:
            connection.close()

    with ThreadPoolExecutor(count) as pool:
        return [f.result(timeout=30) for f in [pool.submit(run) for _ in range(count)]]


def test_two_consumers_opening_the_same_failure_at_once_make_one_with_count_two(node, monkeypatch):
    both_looked = threading.Barrier(2, timeout=10)
    real_open = recording._open

    def open_after_both_looked(*args, **kwargs):
        both_looked.wait()  # each found no active failure; now both insert
        return real_open(*args, **kwargs)

    monkeypatch.setattr(recording, "_open", open_after_both_looked)
    results = in_threads(2, lambda: record_event(node.pk, xid(79)).pk)
    failure = Failure.objects.get()
    assert results == [failure.pk, failure.pk]
    assert failure.count == 2


def test_concurrent_repeats_are_all_counted(node):
    record_event(node.pk, xid(74))
    in_threads(8, lambda: record_event(node.pk, xid(74)))
    assert Failure.objects.get().count == 9
