"""What an agent reports about a command, as messages of the protocol."""

import time

from agents import protocol
from apps.jobs import reports
from apps.jobs.models import Command

T = time.time()  # the agent's clock: as the server's


def started(command: Command, *, repeat: bool = False) -> None:
    reports.command_started(command.node_id, protocol.CommandStarted(key=command.key, started=T, repeat=repeat))


def finished(command: Command, exit_code: int | None = 0, **fields: object) -> None:
    fields = {"outcome": "exited", "started": T, "finished": T + 5, **fields}
    if fields["outcome"] == "exited":
        fields["exit_code"] = exit_code
    reports.command_result(command.node_id, protocol.CommandResult(key=command.key, **fields))  # type: ignore[arg-type]


def failed_compute(gpu: int = 3, measured: float = 612.0) -> protocol.CheckResult:
    low = protocol.CheckMeasurement(
        name="tflops_bf16", measured=measured, unit="TFLOP/s", expected=700.0, passed=False, gpu=gpu
    )
    return protocol.CheckResult(
        check="compute",
        device="cpu",
        device_name="test CPU",
        tool="torch",
        started=T,
        finished=T + 5,
        passed=False,
        measurements=[low],
    )
