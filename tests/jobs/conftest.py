from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents import protocol
from apps.core import events
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from apps.jobs.models import Run, Step
from controlplane.celery import app as celery_app
from tests import factories

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _tasks_run_where_they_are_queued() -> Iterator[None]:
    """The jobs' tasks run in the test's process when queued (once the launch commits), with the
    real task code; the real broker and worker are the fault tests' (test_faults.py)."""
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture
def make_nodes(transactional_db: None) -> Callable[..., list[Node]]:
    def make(count: int, *, liveness: str = Liveness.ONLINE) -> list[Node]:
        cluster, node_type = factories.cluster(), factories.node_type(nics=1)
        nodes = [factories.node(cluster, node_type) for _ in range(count)]
        Node.objects.filter(pk__in=[n.pk for n in nodes]).update(liveness=liveness, last_seen_at=NOW)
        for node in nodes:
            node.refresh_from_db()
        return nodes

    return make


class Dispatched:
    """What the gateway was handed to carry (``CommandsDispatched``), decoded: (node id, message)."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, protocol.ServerMessage]] = []

    def __call__(self, event: events.CommandsDispatched) -> None:
        self.frames += [(node_id, protocol.decode_server_message(frame)) for node_id, frame in event.frames]

    def take(self) -> list[tuple[int, protocol.ServerMessage]]:
        taken, self.frames = self.frames, []
        return taken

    def keys(self) -> list[str]:
        return [message.key for _, message in self.take()]  # type: ignore[union-attr]


@pytest.fixture
def dispatched() -> Iterator[Dispatched]:
    heard = Dispatched()
    events.subscribe(events.CommandsDispatched, heard)
    yield heard
    events.unsubscribe(events.CommandsDispatched, heard)


def launch(
    nodes: Sequence[Node],
    steps: Sequence[Step] = (Step("health"),),
    *,
    deadline: datetime | None = None,
    **fields: Any,
) -> Run:
    return Run.objects.launch(
        nodes=nodes,
        steps=steps,
        deadline=deadline or datetime.now(UTC) + timedelta(hours=1),
        actor="tester",
        **fields,
    )
