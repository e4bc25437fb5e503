"""Commands over the real agent socket (uvicorn, the Redis channel layer, the real storage): a command
reaches its node's agent, what the agent reports is stored, one it missed is sent after its next
Hello, and a report about another node's command is refused and counted."""

import pytest

from agents import protocol
from apps.gateway.models import GatewayCounter, NodeAgent
from apps.gateway.push import agent_group
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from apps.jobs.choices import CommandState, RunState
from apps.jobs.models import Command, Run, Step
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

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


async def receive_command(agent) -> protocol.ServerMessage:
    """The next message that is not an ack (the agent's own telemetry is acked meanwhile)."""
    while not isinstance(message := await agent.receive(), protocol.Command | protocol.Cancel):
        assert isinstance(message, protocol.Ack), message
    return message


def online(node: Node) -> None:
    Node.objects.filter(pk=node.pk).update(liveness=Liveness.ONLINE)


async def test_a_command_reaches_its_nodes_agent_and_its_reports_end_the_run(connect_agent):  # noqa: F811
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    run = await in_db(launch)([node], [Step("health"), Step("storage", {"size_bytes": 1 << 20})])
    first = await receive_command(agent)
    assert (type(first), first.check) == (protocol.Command, "health")

    await agent.send(protocol.CommandStarted(key=first.key, started=T))
    progress = protocol.CheckProgress(check="health", fraction=0.5, step="GPU counters")
    await agent.send(protocol.CommandUpdate(key=first.key, line=progress))
    await agent.send(protocol.CommandResult(key=first.key, outcome="exited", exit_code=0, started=T, finished=T + 1))
    second = await receive_command(agent)  # the next step goes out once the first is over
    assert second.check == "storage"
    await agent.send(protocol.CommandResult(key=second.key, outcome="exited", exit_code=0, started=T, finished=T + 2))
    await agent.roundtrip()  # everything before it is handled

    commands = await in_db(lambda: list(Command.objects.filter(run=run).values_list("state", "fraction", "step")))()
    assert commands == [(CommandState.SUCCEEDED, 1.0, "GPU counters"), (CommandState.SUCCEEDED, 1.0, "")]
    assert (await in_db(Run.objects.get)(pk=run.pk)).state == RunState.SUCCEEDED


async def test_a_command_reaches_a_socket_that_outlived_a_redis_which_forgot_its_groups(
    connect_agent,  # noqa: F811
    redis_channel_layer,
):
    """Redis restarted empty: the node's group is gone, the consumer and its socket are not."""
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()
    channel = await in_db(lambda: NodeAgent.objects.get(node=node).channel_name)()
    await redis_channel_layer.group_discard(agent_group(node.pk), channel)

    run = await in_db(launch)([node], [Step("health")])
    command = await receive_command(agent)

    assert command.key == await in_db(lambda: Command.objects.get(run=run).key)()


async def test_a_command_sent_while_the_agent_was_away_goes_out_after_its_hello(connect_agent):  # noqa: F811
    node, credential = await in_db(enrolled_node)()
    await in_db(online)(node)  # the gateway believes it online: its socket went without a goodbye
    run = await in_db(launch)([node], [Step("compute")])
    command = await in_db(Command.objects.get)(run=run)
    assert (command.state, command.attempts) == (CommandState.SENT, 1)  # sent to nobody

    agent = await connect_agent(credential, node.hostname)
    welcome = await agent.hello()
    assert isinstance(welcome, protocol.Welcome)
    again = await receive_command(agent)

    assert (again.key, again.check) == (command.key, "compute")
    assert (await in_db(Command.objects.get)(pk=command.pk)).attempts == 2


async def test_a_report_about_a_command_the_node_never_had_is_refused_and_the_socket_goes_on(connect_agent):  # noqa: F811
    node, credential = await in_db(enrolled_node)()
    other, _ = await in_db(enrolled_node)()
    await in_db(online)(other)
    run = await in_db(launch)([other], [Step("health")])
    foreign = await in_db(lambda: Command.objects.get(run=run).key)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await agent.send(protocol.CommandStarted(key=foreign, started=T))
    refusal = await agent.receive()

    assert isinstance(refusal, protocol.Error)
    assert (refusal.code, refusal.key) == ("invalid", foreign)
    assert "No command" in refusal.message
    assert isinstance(await agent.roundtrip(), protocol.Ack)
    assert (await in_db(Command.objects.get)(key=foreign)).state == CommandState.SENT
    assert await eventually(lambda: GatewayCounter.objects.filter(node=node, code="invalid").exists())
