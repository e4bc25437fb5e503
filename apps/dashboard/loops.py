"""An event loop on a thread of its own, with a channel layer of its own: what the live publisher
(apps/dashboard/live.py) and the fleet mirror (apps/dashboard/fleet_mirror.py) run on, so that their
Redis connections are touched by no other loop and they need no one to say which loop the server
runs, or whether it runs one."""

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import BaseChannelLayer, channel_layers

T = TypeVar("T")


@dataclass
class LoopThread:
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    layer: BaseChannelLayer

    @classmethod
    def start(cls, name: str) -> "LoopThread":
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=_run_until_stopped, args=(loop,), name=name, daemon=True)
        thread.start()  # daemon: a process without a lifespan exits without stopping it
        return cls(loop, thread, channel_layers.make_backend(DEFAULT_CHANNEL_LAYER))  # the settings then in force

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``coroutine`` on this loop, from any thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def stop(self) -> None:
        """Stop the loop and wait for its thread (the loop's Redis connections close with it)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self.thread.join)


def _run_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()  # on its own thread, where channels_redis can close the loop's connections as it closes
