from datetime import UTC, datetime

import pytest

from agents.protocol import Events, GpuEvent
from tests import factories

# Event timestamps as agents send them: seconds since the epoch.
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def node(db):
    return factories.node(factories.cluster(), factories.node_type(nics=2))


def xid(code: int, *, gpu: int | None = 0, at: float = T0, data: str = "") -> GpuEvent:
    return GpuEvent(ts=at, kind="xid", gpu_index=gpu, xid=code, data=data)


def events(*items: GpuEvent, seq: int = 1) -> Events:
    return Events(seq=seq, events=list(items))
