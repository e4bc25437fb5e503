"""Commands: the server asks a node's agent to run a check, or to stop one; the agent says it started
it, relays the check's progress and log lines, and reports how it ended.

Delivery is at least once, execution at most once per ``key``: the server sends a command again
until the agent answers it (and again after every reconnect while it is open), and the agent keeps
every key it has run on disk, answering a repeat with what it has (``CommandStarted(repeat=True)``
while it runs, the stored ``CommandResult(repeat=True)`` once it is over). A Cancel is answered the
same way: with the result of the command it stopped, or of one it never had (``refused``).

A command runs as a process of its own (``python -m agents.executors CHECK``), in its own process
group, for at most ``time_limit_s``, with the agent's environment plus ``env``. Only variables that
tune the libraries a check uses may be set (``NCCL_*``, ``CUDA_*``, ...): never ``PATH``,
``LD_PRELOAD`` or ``PYTHONPATH``, which would hand whoever can start a run the node itself.
"""

from typing import Annotated, Final, Literal

import msgspec

from agents.protocol.base import CommandKey, Message, Timestamp
from agents.protocol.checks import CheckLog, CheckName, CheckProgress, CheckResult, LongText, check_json_object

MAX_TIME_LIMIT_S: Final = 7 * 24 * 3600
MAX_PARAMS_BYTES: Final = 64 * 1024
MAX_ENV_VARS: Final = 64
MAX_OUTPUT_CHARS: Final = 32 * 1024  # the end of a command's stderr; with a result, still under MAX_FRAME_BYTES
ENV_PREFIXES: Final = ("NCCL", "CUDA", "TORCH", "OMP", "GLOO", "UCX", "NVIDIA")

EnvName = Annotated[str, msgspec.Meta(max_length=128, pattern=rf"^({'|'.join(ENV_PREFIXES)})_[A-Z0-9_]+$")]
EnvValue = Annotated[str, msgspec.Meta(max_length=4096)]
Params = Annotated[dict[Annotated[str, msgspec.Meta(min_length=1, max_length=64)], object], msgspec.Meta(max_length=64)]
ExitCode = Annotated[int, msgspec.Meta(ge=-255, le=255)]  # negative: killed by that signal (Popen's convention)
# How a command ended on the node: its process exited (with exit_code: 0 passed, 1 failed, 2 bad
# parameters, 3 could not run), ran past its time limit, was stopped by a Cancel, was lost (the agent
# restarted while it ran, and does not run it again), or was refused (never started: past its
# deadline, a Cancel of a key the agent never had, a command this agent cannot run).
CommandOutcome = Literal["exited", "timed_out", "cancelled", "lost", "refused"]


# Server → agent ----------------------------------------------------------------------------------


class Command(Message, tag="command"):
    key: CommandKey
    check: CheckName
    time_limit_s: Annotated[int, msgspec.Meta(ge=1, le=MAX_TIME_LIMIT_S)]
    deadline: Timestamp  # the agent does not start a command past it
    params: Params = {}
    env: Annotated[dict[EnvName, EnvValue], msgspec.Meta(max_length=MAX_ENV_VARS)] = {}
    invasive: bool = True  # the agent runs one invasive command at a time, the others meanwhile

    def __post_init__(self) -> None:
        check_json_object(self.params, MAX_PARAMS_BYTES, "params")


class Cancel(Message, tag="cancel"):
    key: CommandKey
    reason: LongText = ""


# Agent → server ----------------------------------------------------------------------------------


class CommandStarted(Message, tag="command_started"):
    """The agent has the command: it started it at ``started``, or (``repeat``) it is still running it."""

    key: CommandKey
    started: Timestamp
    repeat: bool = False


class CommandUpdate(Message, tag="command_update"):
    """A progress or log line the command's check wrote, relayed as it was validated."""

    key: CommandKey
    line: CheckProgress | CheckLog


class CommandResult(Message, tag="command_result"):
    """How the command ended; ``result`` is the check's own result line when it wrote one, ``output`` the
    end of its stderr. Kept by the agent and sent again, with ``repeat``, whenever the key is asked about."""

    key: CommandKey
    outcome: CommandOutcome
    finished: Timestamp
    started: Timestamp | None = None  # None when it never started
    exit_code: ExitCode | None = None
    result: CheckResult | None = None
    output: Annotated[str, msgspec.Meta(max_length=MAX_OUTPUT_CHARS)] = ""
    output_truncated: bool = False  # more was written than ``output`` keeps
    detail: LongText = ""  # why, in words: "time limit of 600 s", "the agent restarted while it ran"
    repeat: bool = False

    def __post_init__(self) -> None:
        if (self.outcome == "exited") != (self.exit_code is not None):
            raise ValueError("exit_code is given when, and only when, the outcome is 'exited'")
        if self.started is not None and self.finished < self.started:
            raise ValueError("a command cannot finish before it started")
