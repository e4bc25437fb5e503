"""The agent runs each command key at most once, however often it is sent, and across its own restart:
a repeat is answered with what it has, an agent restarted mid-command does not run it again (and kills
what is left of it), invasive commands run one at a time, and a cancel stops the command's group."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from agents.commands.executor import CommandExecutor
from agents.commands.runner import SubprocessRunner
from agents.commands.store import CommandStore
from agents.protocol import Cancel, CommandResult, CommandStarted, decode_agent_message
from tests.agents.commands.conftest import STANDIN, alive, command, group_members, runs

pytestmark = pytest.mark.asyncio


class Agent:
    """An executor on a store directory, and what it said, decoded."""

    def __init__(self, directory: Path, runner: SubprocessRunner) -> None:
        self.executor = CommandExecutor(CommandStore(directory), runner, label="test")
        self.said: list[object] = []

    def take(self) -> list[object]:
        while (frame := self.executor.next_frame()) is not None:
            self.said.append(decode_agent_message(frame))
            self.executor.sent()
        taken, self.said = self.said, []
        return taken

    async def result(self, key: str, timeout: float = 30.0) -> CommandResult:
        deadline = time.monotonic() + timeout
        while True:
            for message in self.take():
                if isinstance(message, CommandResult) and message.key == key:
                    return message
            assert time.monotonic() < deadline, f"no result for {key}"
            await asyncio.sleep(0.02)


@pytest.fixture
def agent(tmp_path, runner) -> Agent:
    return Agent(tmp_path / "commands", runner)


async def test_a_key_sent_again_runs_once_and_is_answered_with_its_stored_result(agent, marker):
    cmd = command("k-once", params={"marker": str(marker)})
    agent.executor.receive(cmd)
    first = await agent.result("k-once")

    agent.executor.receive(cmd)
    again = agent.take()

    assert runs(marker) == ["k-once"]
    assert first.outcome == "exited"
    assert again == [msgspec.structs.replace(first, repeat=True)]


async def test_a_repeat_of_a_running_command_says_it_runs(agent, marker):
    cmd = command("k-long", params={"marker": str(marker), "sleep_s": 60})
    agent.executor.receive(cmd)
    while not runs(marker):  # it is at work
        await asyncio.sleep(0.02)
    agent.take()

    agent.executor.receive(cmd)

    [repeat] = [m for m in agent.take() if isinstance(m, CommandStarted)]
    assert (repeat.key, repeat.repeat) == ("k-long", True)
    agent.executor.receive(Cancel(key="k-long"))
    assert (await agent.result("k-long")).outcome == "cancelled"
    assert runs(marker) == ["k-long"]


async def test_an_agent_restarted_mid_command_does_not_run_it_again_and_kills_what_is_left(tmp_path, marker, runner):
    """The agent dies with kill -9 while its command runs (the command, in a session of its own, lives on).
    The agent that starts next finds the key unfinished: it kills the orphaned group, records the command
    lost, and answers the server's resend with that, never starting it again."""
    directory = tmp_path / "commands"
    survivor = subprocess.Popen(
        [sys.executable, str(STANDIN), "health", "--params", '{"sleep_s": 60, "child": true}'],
        env={**os.environ, "CP_COMMAND_KEY": "k-mid"},
        start_new_session=True,
    )
    store = CommandStore(directory)
    store.accept("k-mid", invasive=True)
    store.started("k-mid", survivor.pid)  # what the first agent had written down when it was killed

    restarted = Agent(directory, runner)
    restarted.executor.receive(command("k-mid", params={"marker": str(marker)}))

    [answer] = restarted.take()
    assert (answer.outcome, answer.repeat) == ("lost", True)
    assert answer.detail == "the agent restarted while it ran; its process group was killed"
    assert survivor.wait(timeout=10) == -signal.SIGKILL
    assert group_members(survivor.pid) == []
    assert runs(marker) == []  # never started again


async def test_a_key_accepted_but_never_started_is_lost_not_started_after_a_restart(tmp_path, marker, runner):
    directory = tmp_path / "commands"
    CommandStore(directory).accept("k-early", invasive=True)

    restarted = Agent(directory, runner)
    restarted.executor.receive(command("k-early", params={"marker": str(marker)}))

    [answer] = restarted.take()
    assert (answer.outcome, answer.detail) == ("lost", "the agent restarted before it started it")
    assert runs(marker) == []


async def test_invasive_commands_run_one_at_a_time_and_a_health_read_alongside(agent, marker):
    first = command("k-a", params={"marker": str(marker), "sleep_s": 1})
    second = command("k-b", params={"marker": str(marker)})
    read = command("k-read", check="health", invasive=False, params={"marker": str(marker)})

    for cmd in (first, second, read):
        agent.executor.receive(cmd)
    results = {key: await agent.result(key) for key in ("k-read", "k-a", "k-b")}

    assert runs(marker)[-1] == "k-b"  # started only once k-a was over
    assert results["k-b"].started >= results["k-a"].finished
    assert results["k-read"].finished <= results["k-a"].finished  # did not wait for it


async def test_a_cancel_for_a_key_the_agent_never_had_is_kept_so_the_command_never_runs(agent, marker):
    agent.executor.receive(Cancel(key="k-late", reason="cancelled by olga"))
    agent.executor.receive(command("k-late", params={"marker": str(marker)}))

    answers = agent.take()
    assert [(a.outcome, a.repeat) for a in answers] == [("refused", False), ("refused", True)]
    assert answers[0].detail == "cancelled before the agent had it; never started"
    assert runs(marker) == []


async def test_a_command_past_its_deadline_is_refused(agent, marker):
    late = command("k-stale", params={"marker": str(marker)})
    late.deadline = time.time() - 1

    agent.executor.receive(late)

    [answer] = agent.take()
    assert (answer.outcome, answer.detail) == ("refused", "it came after its deadline; not started")
    assert runs(marker) == []


async def test_a_command_the_agent_cannot_read_is_refused_once(agent):
    agent.executor.refuse_unreadable("k-new", "Invalid enum value 'defragment'")
    agent.executor.refuse_unreadable("k-new", "Invalid enum value 'defragment'")

    answers = agent.take()
    assert [(a.outcome, a.repeat) for a in answers] == [("refused", False), ("refused", True)]
    assert "upgrade the agent" in answers[0].detail


async def test_a_stopping_agent_stops_what_runs_and_keeps_it_as_lost(tmp_path, marker, runner):
    directory = tmp_path / "commands"
    agent = Agent(directory, runner)
    agent.executor.receive(command("k-stop", params={"marker": str(marker), "sleep_s": 60, "child": True}))
    while not [m for m in agent.said + agent.take() if isinstance(m, CommandStarted)]:
        await asyncio.sleep(0.02)
    pid = CommandStore(directory).get("k-stop").pid

    await agent.executor.close()

    record = CommandStore(directory).get("k-stop")
    assert (record.state, record.result.outcome) == ("finished", "lost")
    assert record.result.detail.startswith("the agent was stopped while it ran")
    assert not alive(pid)
    assert group_members(pid) == []
