"""Runs end to end with real agents: the control plane (uvicorn, the Redis channel layer, the real
storage, the jobs' tasks) and agents that are the real ``Agent`` with its command executor, running
each command as a process (a stand-in check that counts its runs). A run completes with every key
run once; a cancel from the API leaves no process; an agent restarted mid-command does not run it
again, and the control plane hears that it was lost."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from agents.agent import Agent
from agents.buffer import TelemetryBuffer
from agents.commands.executor import CommandExecutor
from agents.commands.runner import SubprocessRunner
from agents.commands.store import CommandStore
from agents.transport import Backoff
from apps.accounts.roles import Role
from apps.jobs.choices import CommandState, RunState
from apps.jobs.models import Command, Run, Step
from tests.agents.commands.conftest import PROGRAM, group_members, runs
from tests.agents.doubles import FakeCollector
from tests.gateway.conftest import asgi_application, enrolled_node, in_db, server_url, storage  # noqa: F401  (fixtures)
from tests.jobs.conftest import launch

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


class RunningAgent:
    def __init__(self, agent: Agent, task: asyncio.Task[None], stop: asyncio.Event) -> None:
        self.agent, self.task, self.stop = agent, task, stop

    async def kill(self) -> None:
        """As kill -9 would: no goodbye, no cleanup; what it ran lives on in its own session."""

        async def no_cleanup() -> None:
            pass

        self.agent.commands.close = no_cleanup  # type: ignore[method-assign]
        self.agent.transport.abort()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@pytest_asyncio.fixture
async def start_agent(server_url: str, tmp_path: Path) -> AsyncIterator[Callable[..., RunningAgent]]:  # noqa: F811
    started: list[RunningAgent] = []

    def start(hostname: str, credential: str) -> RunningAgent:
        executor = CommandExecutor(
            CommandStore(tmp_path / hostname / "commands"), SubprocessRunner(PROGRAM, grace_s=2), label=hostname
        )
        agent = Agent(
            FakeCollector(hostname, gpus=1, ports=0),
            TelemetryBuffer(None, label=hostname),
            server_url=server_url,
            credential=credential,
            hostname=hostname,
            interval=0.5,
            follow_server_interval=False,
            backoff=Backoff(base=0.05, cap=0.2),
            commands=executor,
        )
        stop = asyncio.Event()
        started.append(RunningAgent(agent, asyncio.create_task(agent.run(stop)), stop))
        return started[-1]

    yield start
    for running in started:
        running.stop.set()
    await asyncio.gather(*(running.task for running in started), return_exceptions=True)


async def until(check: Callable[[], object], timeout: float = 30.0) -> object:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (result := await in_db(check)()):
        assert asyncio.get_running_loop().time() < deadline, "the condition did not come true"
        await asyncio.sleep(0.1)
    return result


def run_state(run: Run) -> str:
    return Run.objects.get(pk=run.pk).state


async def test_a_run_on_real_agents_completes_with_every_command_run_once(start_agent, tmp_path):
    marker = tmp_path / "runs.txt"
    nodes = [await in_db(enrolled_node)() for _ in range(3)]
    for node, credential in nodes:
        start_agent(node.hostname, credential)
    steps = [Step("health", {"marker": str(marker)}), Step("storage", {"marker": str(marker), "sleep_s": 0.2})]

    run = await in_db(launch)([node for node, _ in nodes], steps)
    await until(lambda: run_state(run) in (RunState.SUCCEEDED, RunState.FAILED))

    assert await in_db(run_state)(run) == RunState.SUCCEEDED
    keys = await in_db(lambda: sorted(Command.objects.filter(run=run).values_list("key", flat=True)))()
    assert sorted(runs(marker)) == keys  # each once
    results = await in_db(lambda: list(Command.objects.filter(run=run).values_list("result", flat=True)))()
    assert {result["device_name"] for result in results} == {"stand-in"}


async def test_a_cancel_from_the_api_stops_the_command_and_leaves_no_process(start_agent, tmp_path, api_client):
    marker = tmp_path / "runs.txt"
    node, credential = await in_db(enrolled_node)()
    start_agent(node.hostname, credential)
    run = await in_db(launch)([node], [Step("compute", {"marker": str(marker), "sleep_s": 60, "child": 1})])
    await until(lambda: runs(marker) and Command.objects.filter(run=run, state=CommandState.RUNNING).exists())

    operator = await in_db(api_client)(Role.OPERATOR)
    response = await in_db(operator.post)(f"/api/v1/runs/{run.pk}/cancel", {"reason": "test"}, format="json")
    assert response.status_code == 200

    command = await until(
        lambda: Command.objects.filter(run=run, outcome="cancelled", stop_requested_at__isnull=True).first()
    )
    assert command.state == CommandState.CANCELLED
    assert command.result["error"].startswith("interrupted by SIGTERM")  # what the check had, reported
    assert group_members(command.result["evidence"]["pgid"]) == []


async def test_an_agent_restarted_mid_command_does_not_run_it_again(start_agent, tmp_path):
    marker = tmp_path / "runs.txt"
    node, credential = await in_db(enrolled_node)()
    first = start_agent(node.hostname, credential)
    run = await in_db(launch)([node], [Step("compute", {"marker": str(marker), "sleep_s": 60})])
    await until(lambda: runs(marker) and Command.objects.filter(run=run, state=CommandState.RUNNING).exists())

    await first.kill()
    start_agent(node.hostname, credential)  # on the same state directory: it remembers the key

    command = await until(lambda: Command.objects.filter(run=run, state=CommandState.FAILED).first())
    assert command.outcome == "lost"
    assert command.reason.startswith("lost: the agent restarted while it ran; its process group was killed")
    assert len(runs(marker)) == 1
    assert await in_db(run_state)(run) == RunState.FAILED
