"""The ASGI lifespan: the server process's parts (apps/core/process.py) started when uvicorn starts
and shut down when it stops, on the server's event loop.

uvicorn runs it by default (``--lifespan auto``); with ``--lifespan off`` the parts start on first
use and go with the process, without writing what is pending.
"""

from collections.abc import Awaitable, Callable
from typing import Any

from apps.core.process import Serves, process

Lifespan = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def lifespan_of(serves: Serves) -> Lifespan:
    """The lifespan of a process that answers ``serves``: it starts the parts those need."""

    async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    process.start(serves)
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    await process.shutdown()
                except Exception as exc:
                    await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.shutdown.complete"})
                return

    return lifespan


lifespan = lifespan_of(Serves.EVERYTHING)
