"""Command reports are stored beside the agent socket's message loop (apps/gateway/store_pipeline.py):
while a report waits for the database, the socket is still read, its pings answered and its telemetry
acked; reports are stored in the order sent; a refused or failed one still gets its Error; and one
dropped with its connection is asked for again at the next Hello."""

import asyncio
from collections.abc import Iterator

import pytest

from agents import protocol
from apps.gateway import sinks
from apps.gateway.models import NodeAgent
from apps.jobs.choices import CommandState
from apps.jobs.models import Command, CommandLogLine, Step
from tests.gateway.conftest import (  # noqa: F401  (fixtures)
    asgi_application,
    connect_agent,
    enrolled_node,
    eventually,
    in_db,
    server_url,
    storage,
)
from tests.jobs.conftest import launch
from tests.jobs.reporting import T
from tests.jobs.test_gateway import receive_command

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


class SlowStore:
    """The gateway's report store, held shut until ``open()``: a database thread busy with a fleet's
    Hellos and acknowledgements. Records the keys and kinds of the reports in the order they reach it."""

    def __init__(self) -> None:
        self.real = sinks.store_command_report
        self.gate = asyncio.Event()
        self.arrived: list[tuple[str, str]] = []
        self.failing: set[str] = set()

    async def __call__(self, item: tuple[int, sinks.CommandReport]) -> protocol.ProtocolError | None:
        await self.gate.wait()
        _, report = item
        self.arrived.append((type(report).__name__, report.key))
        if report.key in self.failing:
            raise RuntimeError("the database went away")
        return await self.real(item)

    def open(self) -> None:
        self.gate.set()


@pytest.fixture
def slow_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowStore]:
    store = SlowStore()
    monkeypatch.setattr(sinks, "store_command_report", store)
    yield store
    store.open()


async def agent_with_a_command(connect_agent):  # noqa: F811
    """An agent that said Hello, and the health command it was just sent."""
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()
    await in_db(launch)([node], [Step("health")])
    command = await receive_command(agent)
    return node, credential, agent, command


async def test_a_socket_whose_report_waits_for_the_database_is_still_read(connect_agent, slow_store):  # noqa: F811
    _, _, agent, command = await agent_with_a_command(connect_agent)

    await agent.send(protocol.CommandStarted(key=command.key, started=T))
    await agent.send(agent.telemetry())
    ack = await agent.receive()  # not held up behind the report
    pong = await agent.socket.ping()
    await asyncio.wait_for(pong, timeout=5)  # uvicorn reads the ping only when the consumer reads on

    assert ack == protocol.Ack(stream="telemetry", seq=1)
    assert (await in_db(Command.objects.get)(key=command.key)).state == CommandState.SENT
    slow_store.open()
    assert await eventually(lambda: Command.objects.get(key=command.key).state == CommandState.RUNNING)


async def test_reports_are_stored_in_the_order_the_agent_sent_them(connect_agent, slow_store):  # noqa: F811
    _, _, agent, command = await agent_with_a_command(connect_agent)
    progress = protocol.CheckProgress(check="health", fraction=0.5, step="GPU counters")
    lines = [protocol.CheckLog(check="health", level="info", message=f"line {n}") for n in range(12)]
    reports = [
        protocol.CommandStarted(key=command.key, started=T),
        protocol.CommandUpdate(key=command.key, line=progress),
        *(protocol.CommandUpdate(key=command.key, line=line) for line in lines),
        protocol.CommandResult(key=command.key, outcome="exited", exit_code=0, started=T, finished=T + 1),
    ]

    for report in reports:
        await agent.send(report)
    await agent.roundtrip()  # all of them queued behind the store
    slow_store.open()

    def stored() -> bool:
        return Command.objects.get(key=command.key).state == CommandState.SUCCEEDED

    assert await eventually(stored)
    assert slow_store.arrived == [(type(r).__name__, command.key) for r in reports]
    messages = await in_db(
        lambda: list(CommandLogLine.objects.filter(command__key=command.key).values_list("message", flat=True))
    )()
    assert messages == [line.message for line in lines]
    row = await in_db(Command.objects.get)(key=command.key)
    assert (row.step, row.fraction) == ("GPU counters", 1.0)  # the progress came before the result


async def test_a_refused_report_behind_a_slow_one_still_gets_its_error(connect_agent, slow_store):  # noqa: F811
    _, _, agent, command = await agent_with_a_command(connect_agent)

    await agent.send(protocol.CommandStarted(key=command.key, started=T))
    await agent.send(protocol.CommandStarted(key="f" * 32, started=T))  # not one of this node's
    assert await agent.roundtrip() == protocol.Ack(stream="telemetry", seq=1)
    slow_store.open()
    refusal = await agent.receive()

    assert isinstance(refusal, protocol.Error)
    assert (refusal.code, refusal.key) == ("invalid", "f" * 32)
    assert "No command" in refusal.message
    assert await eventually(lambda: Command.objects.get(key=command.key).state == CommandState.RUNNING)
    assert isinstance(await agent.roundtrip(), protocol.Ack)  # the socket goes on


async def test_a_report_the_store_fails_on_gets_an_internal_error_naming_its_key(connect_agent, slow_store):  # noqa: F811
    _, _, agent, command = await agent_with_a_command(connect_agent)
    slow_store.failing.add(command.key)
    slow_store.open()

    await agent.send(protocol.CommandStarted(key=command.key, started=T))
    error = await agent.receive()

    assert isinstance(error, protocol.Error)
    assert (error.code, error.key) == ("internal", command.key)
    assert isinstance(await agent.roundtrip(), protocol.Ack)
    assert (await in_db(Command.objects.get)(key=command.key)).state == CommandState.SENT  # asked again later


async def test_a_report_dropped_with_its_connection_is_asked_for_again_at_the_next_hello(
    connect_agent,  # noqa: F811
    slow_store,
):
    node, credential, agent, command = await agent_with_a_command(connect_agent)
    await agent.send(protocol.CommandStarted(key=command.key, started=T))
    await agent.roundtrip()
    await agent.socket.close()  # the report still queued behind the store
    assert await eventually(lambda: NodeAgent.objects.get(node=node).disconnected_at is not None)
    slow_store.open()

    again = await connect_agent(credential, node.hostname)
    assert isinstance(await again.hello(), protocol.Welcome)
    resent = await receive_command(again)
    assert resent.key == command.key
    await again.send(protocol.CommandStarted(key=command.key, started=T, repeat=True))  # what the agent kept

    assert await eventually(lambda: Command.objects.get(key=command.key).state == CommandState.RUNNING)
    assert slow_store.arrived == [("CommandStarted", command.key)]  # the dropped one never reached the store
