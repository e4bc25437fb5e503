"""The whole telemetry path with nothing faked: simulated nodes (the real agent over the simulator's
backend, each its own WebSocket) → uvicorn → the gateway → storage, failures and liveness → the real
Redis channel layer → a signed-in browser's ``ws/live``."""

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from agents.config import websocket_url
from agents.simulator.fleet import run_fleet
from apps.accounts.models import User
from apps.failures.choices import FailureKind, FailureState
from apps.failures.models import Failure
from apps.failures.xid import lookup
from apps.gateway.liveness import mark_unreachable, silence_limit
from apps.gateway.models import NodeCredential
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from apps.telemetry.models import NodeGpuSample
from tests import factories
from tests.dashboard.conftest import (  # noqa: F401  (fixtures)
    LiveServer,
    asgi_server,
    open_browser,
)

pytestmark = pytest.mark.django_db(transaction=True)

HOSTNAMES = ("e2e-001", "e2e-002", "e2e-003")
FAULTS = "e2e-002:xid79@3:gpu2"  # GPU 2 of e2e-002 falls off the bus 3 s in
T = TypeVar("T")


def eventually(check: Callable[[], T], *, timeout: float = 15.0, what: str = "the condition") -> T:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.2)
    return result


class SimulatedNodes:
    """Each node its own ``run_fleet`` on one event loop in a thread, so one can be stopped alone."""

    def __init__(self, server_url: str, credentials: dict[str, str]) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="simulated-nodes")
        self._thread.start()
        self._stops: dict[str, asyncio.Event] = {}
        self._runs: dict[str, Any] = {}
        for hostname, credential in credentials.items():
            stop = self._stops[hostname] = asyncio.run_coroutine_threadsafe(self._event(), self.loop).result()
            fleet = run_fleet(server_url, [(hostname, credential)], "h100", 1, FAULTS, stop=stop)
            self._runs[hostname] = asyncio.run_coroutine_threadsafe(fleet, self.loop)

    @staticmethod
    async def _event() -> asyncio.Event:
        return asyncio.Event()

    def stop(self, hostname: str) -> None:
        self.loop.call_soon_threadsafe(self._stops[hostname].set)
        self._runs[hostname].result(timeout=10)

    def close(self) -> None:
        for hostname in self._stops:
            self.stop(hostname)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def nodes(asgi_server: LiveServer) -> Iterator[tuple[dict[str, Node], SimulatedNodes]]:  # noqa: F811
    cluster, node_type = factories.cluster(), factories.node_type()
    by_hostname = {hostname: factories.node(cluster, node_type, hostname) for hostname in HOSTNAMES}
    credentials = {hostname: NodeCredential.issue(node)[1] for hostname, node in by_hostname.items()}
    simulated = SimulatedNodes(websocket_url(asgi_server.origin), credentials)
    yield by_hostname, simulated
    simulated.close()


def test_simulated_nodes_are_stored_streamed_alarmed_and_missed(nodes, open_browser):  # noqa: F811
    by_hostname, simulated = nodes
    viewer = User.objects.create_user("vera", password="unused-password-1", role="viewer")
    watched = by_hostname["e2e-001"]
    browser = open_browser(viewer)
    assert browser.request({"subscribe": "node", "node": watched.pk})["type"] == "snapshot"

    # Samples are stored within seconds, 8 GPUs per sample, and the nodes come online.
    for node in by_hostname.values():
        eventually(
            lambda node=node: NodeGpuSample.objects.filter(node=node).item_count() >= 16,
            what=f"samples of {node.hostname}",
        )
    online = Node.objects.filter(pk__in=[node.pk for node in by_hostname.values()], liveness=Liveness.ONLINE)
    assert online.count() == len(HOSTNAMES)

    # The watching browser gets deltas carrying the node's fresh GPU values.
    def delta_with_gpus() -> dict[str, Any] | None:
        message = browser.receive(timeout=5)
        state = message.get("nodes", {}).get(str(watched.pk), {}) if message["type"] == "delta" else {}
        return state if state.get("gpus") and state.get("ts") else None

    state = eventually(delta_with_gpus, what="delta with GPU values")
    assert abs(state["ts"] - time.time()) < 10

    # The scripted XID 79 becomes one open failure with the catalog's recommended action.
    failing = by_hostname["e2e-002"]
    failure = eventually(
        lambda: Failure.objects.filter(node=failing, xid=79, state=FailureState.OPEN).first(), what="XID 79 failure"
    )
    assert (failure.gpu_index, failure.kind) == (2, FailureKind.XID)
    assert failure.recommended_action == lookup(79).action

    # A node whose agent stops is marked unreachable by the sweep (driven with a later clock); the rest stay.
    silent = by_hostname["e2e-003"]
    simulated.stop(silent.hostname)
    time.sleep(3)  # the others are heard from since; the stopped one is not
    silent.refresh_from_db()
    marked = mark_unreachable(now=silent.last_seen_at + silence_limit() + timedelta(seconds=1))
    assert [node.hostname for node in marked] == [silent.hostname]
    assert Node.objects.get(pk=silent.pk).liveness == Liveness.UNREACHABLE
    assert Failure.objects.filter(node=silent, kind=FailureKind.LIVENESS, state=FailureState.OPEN).exists()
    assert Node.objects.filter(liveness=Liveness.ONLINE).count() == len(HOSTNAMES) - 1
