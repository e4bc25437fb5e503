"""The ASGI lifespan: the server process's parts (apps/core/process.py) started when uvicorn starts
and shut down when it stops, on the server's event loop.

uvicorn runs it by default (``--lifespan auto``); with ``--lifespan off`` the parts start on first
use and go with the process, without writing what is pending.
"""

from typing import Any

from apps.core.process import process


async def lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                process.start()
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
