"""The garbage-collector settings of long-running server and simulator processes (agents/gc_tuning.py)."""

import gc
from collections.abc import Iterator

import pytest

from agents.gc_tuning import YOUNG_THRESHOLD, freeze_startup_objects


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def tracked(obj: object) -> bool:
    """Whether the collector's generations hold ``obj`` (frozen objects are in none of them)."""
    return any(candidate is obj for candidate in gc.get_objects())


def test_it_freezes_what_exists_and_collects_young_objects_less_often(restored_gc):
    long_lived = [["made at startup"]]  # a list is always tracked (a dict of strings is not)
    gc.unfreeze()
    assert tracked(long_lived)

    freeze_startup_objects()

    assert not tracked(long_lived)
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
