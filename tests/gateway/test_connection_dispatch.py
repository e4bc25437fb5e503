"""An agent connection reads the socket and the channel layer each with a loop of its own, and
dispatches their messages one at a time, as Channels does: a handler that waits never has another
message's handler run beside it, and the connection ends when the socket's disconnect is handled."""

import asyncio
from typing import Any

import pytest
from channels.exceptions import StopConsumer

from apps.gateway import connection
from apps.gateway.connection import AgentConnection


class _Layer:
    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for message in messages:
            self.messages.put_nowait(message)

    async def new_channel(self) -> str:
        return "specific.test!1"

    async def receive(self, channel: str) -> dict[str, Any]:
        return await self.messages.get()


class _Recording(AgentConnection):
    def __init__(self) -> None:
        super().__init__()
        self.handled: list[str] = []
        self.running = 0
        self.most_running = 0

    async def _handle(self, name: str) -> None:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await asyncio.sleep(0.01)  # a handler waiting on the database, say
        self.handled.append(name)
        self.running -= 1

    async def websocket_receive(self, message: dict[str, Any]) -> None:
        await self._handle(message["text"])

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        self.handled.append("disconnect")
        raise StopConsumer

    async def layer_event(self, message: dict[str, Any]) -> None:
        await self._handle(message["name"])


def test_socket_and_channel_layer_messages_are_dispatched_one_at_a_time(monkeypatch):
    consumer = _Recording()
    frames = [f"frame-{n}" for n in range(3)]
    events = [f"layer-{n}" for n in range(3)]

    async def serve() -> None:
        layer = _Layer([{"type": "layer.event", "name": name} for name in events])
        monkeypatch.setattr(connection, "get_channel_layer", lambda alias: layer)
        socket = [{"type": "websocket.receive", "text": name} for name in frames]

        async def receive() -> dict[str, Any]:
            if socket:
                return socket.pop(0)
            while len(consumer.handled) < len(frames) + len(events):  # then the agent leaves
                await asyncio.sleep(0.01)
            return {"type": "websocket.disconnect", "code": 1000}

        await asyncio.wait_for(consumer._serve({"type": "websocket"}, receive, None), 5)

    asyncio.run(serve())

    assert consumer.most_running == 1
    assert sorted(consumer.handled[:-1]) == sorted(frames + events)
    assert consumer.handled[-1] == "disconnect"


def test_a_handler_that_fails_ends_the_connection_with_its_failure(monkeypatch):
    monkeypatch.setattr(connection, "get_channel_layer", lambda alias: _Layer([]))
    consumer = _Recording()

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.unknown"}  # no handler: Channels' dispatch raises ValueError

    with pytest.raises(ValueError, match="No handler"):
        asyncio.run(consumer._serve({"type": "websocket"}, receive, None))
