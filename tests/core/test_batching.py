"""Batched calls (apps/core/batching.py): what arrives while a batch runs is the next batch, one call
for all of it; a failing batch is tried item by item; a caller that stops waiting harms no other."""

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence

import pytest

from apps.core.batching import Batched

pytestmark = pytest.mark.asyncio


class Gate:
    """A batch function that records each batch it gets and, while ``hold`` is clear, blocks in its
    thread: the test decides when a batch finishes, so what queues meanwhile is known."""

    made: list["Gate"] = []  # every gate of the test, released when it ends (release_the_gates)

    def __init__(self, fail_on: str | None = None) -> None:
        self.batches: list[list[str]] = []
        self.hold = threading.Event()
        self.fail_on = fail_on
        Gate.made.append(self)

    def __call__(self, items: Sequence[str]) -> list[str]:
        self.batches.append(list(items))
        self.hold.wait(timeout=5)
        if self.fail_on in items:
            raise ValueError(f"cannot take {self.fail_on}")
        return [item.upper() for item in items]


@pytest.fixture(autouse=True)
def release_the_gates() -> Iterator[None]:
    """A test that fails while a batch is held leaves no thread blocked in it, nor a drain task waiting
    on that thread, for the event loop's teardown to wait on."""
    yield
    for gate in Gate.made:
        gate.hold.set()
    Gate.made.clear()


def in_thread(function: Callable[[Sequence[str]], list[str]]) -> Callable[[Sequence[str]], Awaitable[list[str]]]:
    async def run(items: Sequence[str]) -> list[str]:
        return await asyncio.to_thread(function, items)

    return run


async def started(gate: Gate, batches: int) -> None:
    async with asyncio.timeout(10):  # a batch that never starts fails the test rather than hanging it
        while len(gate.batches) < batches:
            await asyncio.sleep(0.001)


async def test_it_runs_what_arrives_meanwhile_as_one_batch_in_order() -> None:
    gate = Gate()
    batched = Batched(gate, run=in_thread)
    first = asyncio.create_task(batched("a"))
    await started(gate, 1)  # "a" is being written, alone: an idle caller does not wait for company
    rest = [asyncio.create_task(batched(item)) for item in "bcde"]
    await asyncio.sleep(0.01)
    gate.hold.set()
    assert [await first, *[await task for task in rest]] == ["A", "B", "C", "D", "E"]
    assert gate.batches == [["a"], ["b", "c", "d", "e"]]
    assert batched.batches == 2


async def test_a_batch_holds_at_most_max_batch_items() -> None:
    gate = Gate()
    gate.hold.set()
    batched = Batched(gate, run=in_thread, max_batch=2)
    results = await asyncio.gather(*(batched(item) for item in "abcde"))
    assert results == ["A", "B", "C", "D", "E"]
    assert [len(batch) for batch in gate.batches] == [2, 2, 1]


async def test_items_ahead_go_first_in_batches_of_their_own_each_caller_answered_its_own() -> None:
    gate = Gate()
    batched = Batched(gate, run=in_thread, max_batch=3, ahead=lambda item: item.startswith("!"))
    first = asyncio.create_task(batched("a"))
    await started(gate, 1)
    rest = [asyncio.create_task(batched(item)) for item in ("b", "!c", "d", "!e", "f")]
    await asyncio.sleep(0.01)
    gate.hold.set()
    assert [await first, *[await task for task in rest]] == ["A", "B", "!C", "D", "!E", "F"]
    assert gate.batches == [["a"], ["!c", "!e"], ["b", "d", "f"]]


async def test_a_failing_batch_is_tried_item_by_item_so_only_the_bad_item_fails() -> None:
    gate = Gate(fail_on="c")
    gate.hold.set()
    batched = Batched(gate, run=in_thread)
    results = await asyncio.gather(*(batched(item) for item in "abcd"), return_exceptions=True)
    assert results[:2] == ["A", "B"]
    assert results[3] == "D"
    assert isinstance(results[2], ValueError)
    assert str(results[2]) == "cannot take c"
    assert gate.batches == [["a", "b", "c", "d"], ["a"], ["b"], ["c"], ["d"]]


async def test_a_caller_that_stops_waiting_is_left_out_and_the_others_are_answered() -> None:
    gate = Gate()
    batched = Batched(gate, run=in_thread)
    first = asyncio.create_task(batched("a"))
    await started(gate, 1)
    gone, staying = asyncio.create_task(batched("b")), asyncio.create_task(batched("c"))
    await asyncio.sleep(0.01)
    gone.cancel()  # its agent went away while it queued
    gate.hold.set()
    assert (await first, await staying) == ("A", "C")
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert gate.batches == [["a"], ["c"]]


async def test_a_function_that_answers_the_wrong_number_of_results_fails_its_callers() -> None:
    batched = Batched(lambda items: [], run=in_thread)
    results = await asyncio.gather(batched("a"), batched("b"), return_exceptions=True)
    assert all(isinstance(result, RuntimeError) and "0 results for 1 items" in str(result) for result in results)
