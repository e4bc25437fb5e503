"""What an agent reports about a command, as messages of the protocol."""

import time

from agents import protocol
from apps.jobs import reports
from apps.jobs.models import Command

T = time.time()  # a time of the agent's clock (the server's), for reports whose time matters not


def started(command: Command, *, repeat: bool = False, at: float | None = None) -> None:
    """The agent started it now (``at``: then), by its clock, which is the server's."""
    message = protocol.CommandStarted(key=command.key, started=at or time.time(), repeat=repeat)
    reports.store_report(command.node_id, message)


def finished(command: Command, exit_code: int | None = 0, **fields: object) -> None:
    fields = {"outcome": "exited", "started": T, "finished": T + 5, **fields}
    if fields["outcome"] == "exited":
        fields["exit_code"] = exit_code
    reports.store_report(command.node_id, protocol.CommandResult(key=command.key, **fields))  # type: ignore[arg-type]


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
