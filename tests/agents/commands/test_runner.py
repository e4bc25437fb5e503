"""A command as a supervised process: its own process group, the command's environment, a time
limit, bounded output, and a cancel that kills the whole group and still reports what it had."""

import asyncio
import signal

import pytest

from agents.commands.runner import SubprocessRunner
from agents.protocol import MAX_OUTPUT_CHARS, CheckLog, CheckProgress
from tests.agents.commands.conftest import command, group_members

pytestmark = pytest.mark.asyncio


async def run(runner: SubprocessRunner, cmd, *, stop: asyncio.Event | None = None, cancel_after: float | None = None):
    stop = stop or asyncio.Event()
    relayed: list[object] = []
    pids: list[int | None] = []
    if cancel_after is not None:
        asyncio.get_running_loop().call_later(cancel_after, stop.set)
    result = await runner.run(cmd, stop=stop, started=pids.append, relay=relayed.append)
    return result, relayed, pids


async def test_it_runs_the_check_with_the_commands_environment_and_relays_its_lines(runner):
    result, relayed, pids = await run(runner, command("k-env", env={"NCCL_ALGO": "Ring"}, params={"steps": 2}))

    assert (result.outcome, result.exit_code, result.key) == ("exited", 0, "k-env")
    assert result.result is not None
    assert result.result.evidence["nccl_algo"] == "Ring"
    assert result.result.evidence["pgid"] == pids[0]  # it leads a process group of its own
    assert [type(line) for line in relayed] == [CheckProgress, CheckProgress, CheckLog]
    assert result.output.endswith("stand-in done with its stderr\n")
    assert result.started <= result.finished


async def test_a_command_past_its_time_limit_is_stopped_with_its_whole_group(runner):
    cmd = command(params={"sleep_s": 60, "child": True}, time_limit_s=1)

    result, _, pids = await run(runner, cmd)

    assert result.outcome == "timed_out"
    assert result.exit_code is None
    assert result.detail.startswith("time limit of 1 s; the process group was sent SIGTERM; it exited 3")
    assert result.result is not None
    assert result.result.error.startswith("interrupted by SIGTERM")  # what it had, reported
    assert group_members(pids[0]) == []  # the child it started is gone too


async def test_a_cancel_kills_the_group_and_the_result_says_what_the_check_had(runner):
    result, _, pids = await run(runner, command(params={"sleep_s": 60, "child": True}), cancel_after=0.5)

    assert result.outcome == "cancelled"
    assert "stopped on cancel" in result.detail
    assert result.result.error.startswith("interrupted by SIGTERM")
    assert group_members(pids[0]) == []


async def test_a_check_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text("import time\ntime.sleep(60)\n")
    runner = SubprocessRunner(("python3", str(stubborn)), grace_s=0.5)

    # The check ignores SIGTERM from its first instruction: an ignored signal stays ignored across fork
    # and exec. Ignoring it in the script itself raced the time limit on a loaded machine (python had
    # not reached the line when SIGTERM came, and it ended on SIGTERM).
    inherited = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        result, _, pids = await run(runner, command(time_limit_s=1))
    finally:
        signal.signal(signal.SIGTERM, inherited)

    assert result.outcome == "timed_out"
    assert result.detail.endswith("it ended on SIGKILL")
    assert result.result is None
    assert group_members(pids[0]) == []


async def test_its_output_is_kept_bounded_from_the_end(runner):
    result, _, _ = await run(runner, command(params={"stderr_chars": 3 * MAX_OUTPUT_CHARS}))

    assert len(result.output) == MAX_OUTPUT_CHARS
    assert result.output_truncated is True
    assert result.output.endswith("stand-in done with its stderr\n")


async def test_a_line_that_is_no_protocol_line_is_refused_and_said(runner):
    result, _, _ = await run(runner, command(params={"bad_line": True}))

    assert result.outcome == "exited"
    assert "1 line(s) of its output refused; the last: malformed" in result.detail
    assert result.result is not None


async def test_a_program_that_cannot_start_is_refused():
    result, _, pids = await run(SubprocessRunner(("/nonexistent/check-program",)), command())

    assert (result.outcome, result.started, pids) == ("refused", None, [])
    assert result.detail.startswith("could not start /nonexistent/check-program")


async def test_the_real_executors_run_a_check_and_its_result_is_labelled():
    cmd = command(check="storage", params={"size_bytes": 1 << 20, "block_bytes": 1 << 18})

    result, relayed, _ = await run(SubprocessRunner(grace_s=5), cmd)

    assert (result.outcome, result.exit_code) == ("exited", 0), result.output
    assert (result.result.check, result.result.tool) == ("storage", "posix")
    assert {m.name for m in result.result.measurements} >= {"write", "read"}
    assert any(isinstance(line, CheckProgress) for line in relayed)
