"""controlplane/asgi.py ``agent_gateway``: the agents' sockets served by a process of their own, which
answers nothing else."""

import asyncio
import urllib.error
import urllib.request
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from agents import protocol
from tests.gateway.conftest import NOW, enrolled_node, in_db

pytestmark = pytest.mark.asyncio


@pytest.fixture
def asgi_application() -> Any:
    from controlplane.asgi import agent_gateway

    return agent_gateway


async def test_it_serves_an_agent_and_stores_its_telemetry(connect_agent, storage):
    node, secret = await in_db(enrolled_node)()
    agent = await connect_agent(secret, node.hostname)

    assert isinstance(await agent.hello(), protocol.Welcome)
    assert (await agent.roundtrip()).seq == 1  # acked once stored
    assert await storage.sample_times(node) == [NOW + 1]


async def test_it_refuses_a_browsers_socket_and_any_page(server_url):
    live = server_url.replace("/ws/agent", "/ws/live")
    with pytest.raises(InvalidStatus):
        await connect(live, origin="http://127.0.0.1", open_timeout=5)

    page = server_url.replace("ws://", "http://").replace("/ws/agent", "/api/v1/me")
    with pytest.raises(urllib.error.HTTPError) as refused:
        await asyncio.to_thread(urllib.request.urlopen, page, timeout=5)
    assert refused.value.code == 404
