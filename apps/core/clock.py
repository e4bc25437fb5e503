"""Time as an event loop keeps it, passed in to what waits on it, so that tests move it themselves
instead of waiting (tests/clock.py has theirs). What measures real speed belongs in benchmarks/."""

import asyncio
import contextlib
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds, from an arbitrary start."""
        ...

    async def wait(self, until: float, wake: asyncio.Event) -> None:
        """Return once the clock reads ``until``, or sooner once ``wake`` is set."""
        ...


class LoopClock:
    """The running event loop's clock (``loop.time()``): what the server runs on."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def wait(self, until: float, wake: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), until - self.now())
