import asyncio

import pytest

from apps.core import layer_slots
from apps.core.layer_slots import layer_slot

pytestmark = pytest.mark.asyncio


async def test_no_more_than_the_bound_hold_a_slot_at_once_and_the_rest_wait_their_turn(monkeypatch):
    monkeypatch.setattr(layer_slots, "MAX_CONCURRENT_CALLS", 3)
    holding, most, finished = 0, 0, 0

    async def call() -> None:
        nonlocal holding, most, finished
        async with layer_slot():
            holding += 1
            most = max(most, holding)
            await asyncio.sleep(0.01)
            holding -= 1
        finished += 1

    await asyncio.gather(*(call() for _ in range(20)))

    assert (most, finished) == (3, 20)
