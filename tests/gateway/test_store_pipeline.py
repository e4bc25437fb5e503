"""A connection's messages on their way into storage (apps/gateway/store_pipeline.py): each store starts
at once, the answers go out in the order the messages came whatever order the stores end in, a full
pipeline holds the next message back, and a dropped one answers nothing more."""

import asyncio

import pytest

from apps.gateway.store_pipeline import StorePipeline

pytestmark = pytest.mark.asyncio


class Stores:
    """Stores held open until ``end(message, outcome)``; the answers they got, in order."""

    def __init__(self) -> None:
        self.open: dict[str, asyncio.Future[str]] = {}
        self.answers: list[tuple[str, str]] = []

    async def store(self, message: str) -> str:
        self.open[message] = asyncio.get_running_loop().create_future()
        return await self.open[message]

    async def answer(self, message: str, outcome: str | Exception) -> None:
        if message == "answer fails":
            raise RuntimeError("the socket went away")
        self.answers.append((message, outcome if isinstance(outcome, str) else f"failed: {outcome}"))

    def end(self, message: str, outcome: str | Exception) -> None:
        if isinstance(outcome, Exception):
            self.open[message].set_exception(outcome)
        else:
            self.open[message].set_result(outcome)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_every_store_starts_at_once_and_the_answers_keep_the_order_the_messages_came():
    stores = Stores()
    pipeline = StorePipeline("test", stores.store, stores.answer, max_in_flight=10)
    for message in ("a", "b", "c"):
        await pipeline.put(message)
    await settle()
    assert set(stores.open) == {"a", "b", "c"}  # all three in the batch being gathered

    stores.end("c", "stored c")
    stores.end("b", RuntimeError("database away"))
    await settle()
    assert stores.answers == []  # a's answer comes first
    stores.end("a", "stored a")
    await settle()

    assert stores.answers == [("a", "stored a"), ("b", "failed: database away"), ("c", "stored c")]
    await pipeline.drop()


async def test_a_full_pipeline_holds_the_next_message_until_the_oldest_is_answered():
    stores = Stores()
    pipeline = StorePipeline("test", stores.store, stores.answer, max_in_flight=2)
    await pipeline.put("a")
    await pipeline.put("b")
    third = asyncio.create_task(pipeline.put("c"))
    await settle()
    assert not third.done()

    stores.end("a", "stored a")
    await settle()

    assert third.done()
    assert "c" in stores.open
    await pipeline.drop()


async def test_an_answer_that_fails_does_not_stop_the_answers_after_it():
    stores = Stores()
    pipeline = StorePipeline("test", stores.store, stores.answer, max_in_flight=10)
    await pipeline.put("answer fails")
    await pipeline.put("b")
    await settle()
    stores.end("answer fails", "stored")
    stores.end("b", "stored b")
    await settle()

    assert stores.answers == [("b", "stored b")]
    await pipeline.drop()


async def test_a_dropped_pipeline_stops_its_stores_and_answers_nothing_more():
    stores = Stores()
    pipeline = StorePipeline("test", stores.store, stores.answer, max_in_flight=10)
    await pipeline.put("a")
    await settle()
    waiting = stores.open["a"]

    await pipeline.drop()

    assert waiting.cancelled()
    assert stores.answers == []


async def test_a_store_that_gives_a_future_costs_no_task_of_its_own():
    """The ingestor's submit gives a future: a thousand frames a second put no task each on the loop."""
    stores = Stores()
    pending: dict[str, asyncio.Future[str]] = {}

    def store(message: str) -> asyncio.Future[str]:
        pending[message] = asyncio.get_running_loop().create_future()
        return pending[message]

    pipeline = StorePipeline("test", store, stores.answer, max_in_flight=10)
    tasks_before = len(asyncio.all_tasks())
    for message in ("a", "b", "c"):
        await pipeline.put(message)

    assert len(asyncio.all_tasks()) == tasks_before + 1  # the one that answers, in order
    for message in ("b", "a", "c"):
        pending[message].set_result(f"stored {message}")
    await settle()
    assert stores.answers == [("a", "stored a"), ("b", "stored b"), ("c", "stored c")]
