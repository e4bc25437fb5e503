"""The ASGI lifespan starts what the process holds and shuts it down as the server stops: telemetry
still waiting for its batch is written then, and its agent gets the ack."""

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async

from apps.telemetry.ingest import ingestor
from apps.telemetry.models import NodeGpuSample
from controlplane.lifespan import lifespan
from tests import factories
from tests.telemetry.conftest import telemetry

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


class Server:
    """The server's side of the lifespan protocol, as uvicorn speaks it."""

    def __init__(self) -> None:
        self.to_app: asyncio.Queue[dict] = asyncio.Queue()
        self.from_app: asyncio.Queue[dict] = asyncio.Queue()

    async def say(self, message_type: str) -> str:
        await self.to_app.put({"type": message_type})
        return (await asyncio.wait_for(self.from_app.get(), 10))["type"]


async def test_stopping_the_server_writes_the_telemetry_waiting_for_its_batch(settings):
    settings.TELEMETRY_FLUSH_INTERVAL_MS = 60_000  # nothing would be written for a minute
    node = await sync_to_async(lambda: factories.node(factories.cluster(), factories.node_type(nics=0)))()
    server = Server()
    app = asyncio.ensure_future(lifespan({"type": "lifespan"}, server.to_app.get, server.from_app.put))
    assert await server.say("lifespan.startup") == "lifespan.startup.complete"

    ack = asyncio.ensure_future(ingestor.submit(node.pk, telemetry(3)))
    await asyncio.sleep(0)  # the submission is pending
    assert not ack.done()
    assert await server.say("lifespan.shutdown") == "lifespan.shutdown.complete"

    assert await asyncio.wait_for(ack, 10) == 3
    assert await sync_to_async(NodeGpuSample.objects.filter(node=node).item_count)() == 8
    await app


def fleet_mirror_running() -> bool:
    return any(thread.name == "fleet-mirror" for thread in threading.enumerate())


@pytest.mark.parametrize(("application", "mirrors"), [("application", True), ("agent_gateway", False)])
async def test_only_a_process_that_serves_pages_holds_the_fleet_for_them(application, mirrors):
    import controlplane.asgi

    lifespan_app = getattr(controlplane.asgi, application)
    server = Server()
    app = asyncio.ensure_future(lifespan_app({"type": "lifespan"}, server.to_app.get, server.from_app.put))
    assert await server.say("lifespan.startup") == "lifespan.startup.complete"

    assert fleet_mirror_running() is mirrors  # the gateway's loop would merge every fleet message for nothing

    assert await server.say("lifespan.shutdown") == "lifespan.shutdown.complete"
    await app
