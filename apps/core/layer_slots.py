"""A bound on one process's concurrent channel-layer calls.

channels_redis gives each process a pool of 100 Redis connections and raises MaxConnectionsError
past it instead of waiting. A thousand agents dropping at once (a switch reboot, a fleet restart)
each discard their group membership in the same instant: unbounded, most of those calls failed.
Callers that can come in such storms take a slot first; the rest of the pool stays free for
everything else.
"""

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

MAX_CONCURRENT_CALLS = 32

_slots: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = weakref.WeakKeyDictionary()


@asynccontextmanager
async def layer_slot() -> AsyncIterator[None]:
    """Hold one of the running loop's MAX_CONCURRENT_CALLS slots for a channel-layer call."""
    loop = asyncio.get_running_loop()
    slots = _slots.get(loop)
    if slots is None:
        slots = _slots[loop] = asyncio.Semaphore(MAX_CONCURRENT_CALLS)
    async with slots:
        yield
