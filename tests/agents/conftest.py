from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from agents.agent import Agent
from agents.buffer import TelemetryBuffer
from agents.transport import Backoff
from tests.agents.doubles import FakeCollector, FakeControlPlane
from tests.agents.fakes import FakeNvml

FAST = {"interval": 0.1, "heartbeat_interval": 0.1, "discovery_interval": 0.1}


@pytest.fixture
def nvml() -> Iterator[FakeNvml]:
    """A fake NVML patched into pynvml, its mocks at ``.mocks``."""
    fake = FakeNvml()
    with fake.patched() as mocks:
        fake.mocks = mocks
        yield fake


@pytest_asyncio.fixture
async def control_plane() -> AsyncIterator[FakeControlPlane]:
    server = FakeControlPlane(interval_s=0.1)
    await server.start()
    yield server
    if server.running:
        await server.stop()


@pytest.fixture
def make_agent(control_plane: FakeControlPlane, tmp_path: Path) -> Callable[..., Agent]:
    """An agent of a node the control plane knows, sampling every 0.1 s, reconnecting within 0.1 s."""

    def make(
        hostname: str = "node-001",
        *,
        collector: FakeCollector | None = None,
        state_dir: Path | None = None,
        memory_frames: int = 600,
        credential: str | None = None,
        **options: float,
    ) -> Agent:
        known = credential or control_plane.add_node(hostname)
        return Agent(
            collector or FakeCollector(hostname, gpus=2, ports=1),
            TelemetryBuffer(state_dir if state_dir is not None else tmp_path / hostname, memory_frames=memory_frames),
            server_url=control_plane.url,
            credential=known,
            hostname=hostname,
            backoff=Backoff(base=0.05, cap=0.1),
            **{**FAST, **options},
        )

    return make
