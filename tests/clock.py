"""A clock that tests move themselves (apps/core/clock.py's ``Clock``), so that what waits on time is
tested without waiting: the test says when time passes, and asks what the code waits for."""

import asyncio
import threading


class ManualClock:
    """Moves only when ``advance_to`` says, from any thread; code waiting on it, on any event loop,
    wakes once it reaches the time that code waits for."""

    def __init__(self, now: float = 1_000.0) -> None:
        self._now = now
        self._changed = threading.Condition()
        self._waiting: list[tuple[float, asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.waits = 0  # waits begun so far

    def now(self) -> float:
        return self._now

    async def wait(self, until: float, wake: asyncio.Event) -> None:
        reached = asyncio.Event()
        waiter = (until, asyncio.get_running_loop(), reached)
        with self._changed:
            if self._now >= until:
                return
            self._waiting.append(waiter)
            self.waits += 1
            self._changed.notify_all()
        woken, timed = asyncio.ensure_future(wake.wait()), asyncio.ensure_future(reached.wait())
        try:
            await asyncio.wait({woken, timed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            timed.cancel()
            with self._changed:
                self._waiting.remove(waiter)

    def advance_to(self, when: float) -> None:
        with self._changed:
            assert when >= self._now, "time does not go back"
            self._now = when
            reached = [(loop, event) for until, loop, event in self._waiting if until <= when]
        for loop, event in reached:
            loop.call_soon_threadsafe(event.set)

    def waited_for(self, *, after: int, timeout: float = 10.0) -> float:
        """Block until a wait begun after the first ``after`` is under way (the code has taken in what the
        test did since it read ``waits``), and return the earliest time waited for."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.waits > after and self._waiting, timeout):
                raise TimeoutError(f"nothing began to wait on the clock within {timeout} s")
            return min(until for until, _, _ in self._waiting)
