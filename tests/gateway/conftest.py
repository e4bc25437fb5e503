"""A real ASGI server (uvicorn) on a free loopback port, a real Redis channel layer, the real storage,
and agents that are real WebSocket clients.

The server runs on the test's own event loop. Its consumers' database work and the test's run in
the same asgiref worker thread, one after the other, which keeps SQLite's shared in-memory test
database free of lock conflicts; on PostgreSQL connections are closed after each call, so the
test database can be dropped at the end.
"""

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
import uvicorn
from channels.db import database_sync_to_async
from channels.layers import BaseChannelLayer
from django.db import connections
from websockets.asyncio.client import ClientConnection, connect

from agents import protocol
from apps.gateway import bookkeeping
from apps.gateway.bookkeeping import bookkeeper
from apps.gateway.models import NodeCredential
from apps.inventory.models import Node
from tests import factories
from tests.conftest import shut_down_the_process
from tests.gateway.storage import StoredTelemetry, storage  # noqa: F401  (a fixture)

NOW = 1_760_000_000.0  # a fixed agent clock, well inside the protocol's timestamp range
GRACEFUL_SHUTDOWN_S = 5  # how long the server waits at its teardown for the sockets still open

in_db = database_sync_to_async


async def eventually(check: Callable[[], Any], *, timeout: float = 5.0) -> Any:
    """Write the gateway's pending notes and retry ``check`` (run in the database thread) until truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        await bookkeeper().flush()
        result = await in_db(check)()
        if result or asyncio.get_running_loop().time() > deadline:
            return result
        await asyncio.sleep(0.05)


@pytest.fixture
def asgi_application() -> Any:
    """What the server runs: the whole control plane (test_agent_gateway.py runs the agent gateway)."""
    from controlplane.asgi import application

    return application


@pytest_asyncio.fixture
async def server_url(
    asgi_application: Any,
    transactional_db: None,
    redis_channel_layer: BaseChannelLayer,
    storage: StoredTelemetry,  # noqa: F811  (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[str]:
    """``ws://127.0.0.1:<port>/ws/agent`` of the real ASGI application, served by uvicorn with its
    defaults, in front of the real storage (storage.py) and the real channel layer."""
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)
    monkeypatch.setattr(bookkeeping, "TICK_S", 0.1)  # the server's bookkeeping stops within a tick of the last socket
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(
            asgi_application,
            lifespan="off",
            log_config=None,
            log_level="warning",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,  # then a socket left open is cancelled
        )
    )
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:
        await asyncio.sleep(0.01)
    yield f"ws://127.0.0.1:{listener.getsockname()[1]}/ws/agent"
    server.should_exit = True
    await serving
    await bookkeeper().close()  # stops its ticking whatever it still counts open, and writes what is pending
    # The parts that send through the layer from loops of their own (the change publisher) stop first:
    # their loops close their connections, which this loop could not.
    await asyncio.to_thread(shut_down_the_process)
    await redis_channel_layer.close_pools()  # this event loop's; the fixture empties the layer after


class Agent:
    """A node agent's side of the socket, speaking the protocol module's messages."""

    def __init__(self, connection: ClientConnection, hostname: str) -> None:
        self.socket = connection
        self.hostname = hostname
        self.seq = 0

    async def send(self, message: protocol.Message) -> None:
        await self.socket.send(protocol.encode(message).decode())

    async def receive(self) -> protocol.ServerMessage:
        return protocol.decode_server_message(await asyncio.wait_for(self.socket.recv(), timeout=5))

    async def hello(self, hostname: str | None = None, **fields: Any) -> protocol.ServerMessage:
        fields = {"protocol": protocol.PROTOCOL_VERSION, "agent_version": "test", **fields}
        await self.send(protocol.Hello(hostname=hostname or self.hostname, **fields))
        return await self.receive()

    def telemetry(self, seq: int | None = None, **gpu: Any) -> protocol.Telemetry:
        if seq is None:
            self.seq += 1
            seq = self.seq
        sample = protocol.NodeSample(ts=NOW + seq, gpus=[protocol.GpuSample(index=0, util_gpu=97.0, **gpu)])
        return protocol.Telemetry(seq=seq, samples=[sample])

    async def roundtrip(self) -> protocol.Ack:
        """Send telemetry and wait for its ack: everything sent before it has been handled."""
        await self.send(self.telemetry())
        ack = await self.receive()
        assert isinstance(ack, protocol.Ack), ack
        return ack

    async def close_code(self) -> int | None:
        """Wait for the server to close the socket; its close code."""
        await asyncio.wait_for(self.socket.wait_closed(), timeout=5)
        return self.socket.close_code


ConnectAgent = Callable[..., Awaitable[Agent]]


@pytest_asyncio.fixture
async def connect_agent(server_url: str) -> AsyncIterator[ConnectAgent]:
    """Open an agent socket with a credential (``None``: no Authorization header at all)."""
    opened: list[ClientConnection] = []

    async def open_socket(credential: str | None, hostname: str = "") -> Agent:
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        opened.append(await connect(server_url, additional_headers=headers, open_timeout=5))
        return Agent(opened[-1], hostname)

    yield open_socket
    for connection in opened:
        await connection.close()


def enrolled_node(hostname: str | None = None) -> tuple[Node, str]:
    """A node of a fresh cluster with 8 GPUs and 2 HCAs, and a credential for it."""
    node = factories.node(factories.cluster(), factories.node_type(nics=2), hostname)
    _, secret = NodeCredential.issue(node)
    return node, secret
