"""A command frame the channel layer refuses is not lost: the consumers of a server process share one
Redis key with a capacity, and a frame refused while the process reads its backlog is sent again a
moment later; one refused every time is logged and its command sent again when it stays unanswered."""

from datetime import timedelta

import pytest

from agents import protocol
from apps.core.events import AgentFrame, CommandsDispatched
from apps.gateway import push
from apps.gateway.models import NodeAgent
from apps.jobs import dispatch
from apps.jobs.choices import CommandState
from apps.jobs.models import Step
from tests.jobs.conftest import NOW, launch

pytestmark = pytest.mark.django_db(transaction=True)


class FullLayer:
    """A channel layer whose channels refuse the first ``refusals`` sends each, as the layer's
    ``send_many`` refuses what a full channel has no room for: returned, not sent."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.tries: dict[str, int] = {}
        self.delivered: list[tuple[str, str]] = []

    async def send_many(self, messages: list[tuple[str, dict[str, str]]]) -> list[tuple[str, dict[str, str]]]:
        refused = []
        for channel, message in messages:
            self.tries[channel] = self.tries.get(channel, 0) + 1
            if self.tries[channel] <= self.refusals:
                refused.append((channel, message))
            else:
                self.delivered.append((channel, message["frame"]))
        return refused


@pytest.fixture
def agents_at(make_nodes, monkeypatch):
    """Two online nodes whose agents said Hello (their channels recorded), sends not paused for."""
    monkeypatch.setattr(push, "RETRY_PAUSES_S", (0, 0))
    nodes = make_nodes(2)
    for node in nodes:
        NodeAgent.objects.create(node=node, channel_name=f"specific.test!{node.pk}", connected_at=NOW)
    return nodes


def use(layer: FullLayer, monkeypatch) -> FullLayer:
    monkeypatch.setattr(push, "get_channel_layer", lambda: layer)
    return layer


def test_a_frame_refused_by_a_full_channel_is_sent_again_at_once(agents_at, monkeypatch):
    layer = use(FullLayer(refusals=2), monkeypatch)

    push.deliver_commands(
        CommandsDispatched((AgentFrame(agents_at[0].pk, b"one"), AgentFrame(agents_at[1].pk, b"two")))
    )

    assert sorted(layer.delivered) == [
        (f"specific.test!{agents_at[0].pk}", "one"),
        (f"specific.test!{agents_at[1].pk}", "two"),
    ]


def test_a_command_whose_frame_is_refused_every_time_is_sent_again_when_unanswered(agents_at, monkeypatch, caplog):
    layer = use(FullLayer(refusals=3), monkeypatch)  # every try of the first send, none of the resend's
    run = launch(agents_at[:1], [Step("health")])
    command = run.commands.get()
    assert command.state == CommandState.SENT
    assert layer.delivered == []
    assert "1 of 1 command frames refused by full channels" in caplog.text

    resent = dispatch.resend(command.sent_at + dispatch.ack_timeout() + timedelta(seconds=1))

    assert [c.pk for c in resent] == [command.pk]
    assert [frame for _, frame in layer.delivered] == [protocol.encode(command.message()).decode()]
    assert run.commands.get().attempts == 2
