"""A connection's telemetry frames on their way into storage, each acked once stored, beside the
connection's message loop.

The consumer used to await each frame's store (the ingestor's next batch, 250 ms and a write away)
before it asked uvicorn for the next frame, and uvicorn reads a socket only when asked: an agent
replaying its backlog (up to 64 frames in flight, agents/transport.py) had its pings and pongs queued
behind frames acked one batch at a time. On a loaded machine, with a thousand agents, that passed
the 20 s keepalive timeout, uvicorn closed the sockets, and the fleet reconnected round and round.
Now each frame is handed to the ingestor (apps/telemetry/ingest.py) at once and the loop reads on;
its ack goes out when its batch is committed. Batches are committed in arrival order, so the acks
still go out in seq order, and each says the highest seq stored.

An agent keeps at most 64 frames in flight (agents/transport.py), and ``MAX_IN_FLIGHT`` lets all of
them be pending here: its command reports travel on the same socket behind them, and a window of
one frame (as before) held a fleet's ``command_started`` behind its telemetry backlog for most of a
minute (dispatch.py at 1,000 agents: 0 of 1,000 acknowledged within 60 s, no socket lost). Past it
the socket is read at the pace frames are stored. Frames
pending when the connection ends are not acked (the ingestor still writes what it was given); the
agent replays them and the seq check drops what is stored.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from agents import protocol
from apps.gateway import sinks

MAX_IN_FLIGHT: Final = 64

Stored = Callable[[int], Awaitable[None]]
Failed = Callable[[protocol.Telemetry, Exception], Awaitable[None]]


class TelemetryAcks:
    """``await acks.put(frame)`` hands the frame to the ingestor; ``stored(seq)`` is awaited with the
    node's stored seq once it is committed, or ``failed(frame, error)`` if its batch was not."""

    def __init__(self, node_id: int, *, stored: Stored, failed: Failed) -> None:
        self.node_id = node_id
        self.stored = stored
        self.failed = failed
        self._room = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._storing: set[asyncio.Task[None]] = set()

    async def put(self, frame: protocol.Telemetry) -> None:
        await self._room.acquire()
        task = asyncio.create_task(self._store(frame), name=f"telemetry-{self.node_id}-{frame.seq}")
        self._storing.add(task)
        task.add_done_callback(self._storing.discard)

    async def drop(self) -> None:
        """The connection ended: stop waiting for acks (what the ingestor was given is still written)."""
        storing, self._storing = list(self._storing), set()
        for task in storing:
            task.cancel()
        await asyncio.gather(*storing, return_exceptions=True)

    async def _store(self, frame: protocol.Telemetry) -> None:
        try:
            stored = await sinks.store_telemetry(self.node_id, frame)
        except Exception as exc:
            await self.failed(frame, exc)
        else:
            await self.stored(stored)
        finally:
            self._room.release()
