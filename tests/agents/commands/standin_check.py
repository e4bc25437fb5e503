"""A stand-in for ``python -m agents.executors CHECK --params JSON`` whose behaviour the parameters
set, so tests can make a command slow, noisy, failing or multi-process, and count its runs:

- ``marker``: a file it appends ``<CP_COMMAND_KEY> <pid>`` to as it starts (a count of executions);
- ``sleep_s``: how long it works (in ``steps`` progress lines); ``exit``: its exit code;
- ``child``: start ``sleep 600`` in its own process group (what a kill of the group must reach);
- ``stderr_chars``: how much it writes to stderr; ``bad_line``: a line on stdout that is no protocol line.

On SIGTERM it writes a result saying so, with what it had, and exits 3, as the real checks do.
"""

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

check, _, raw = sys.argv[1:4]
params: dict[str, Any] = json.loads(raw)
began = time.time()


def line(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def result(error: str | None = None) -> None:
    evidence = {"nccl_algo": os.environ.get("NCCL_ALGO"), "pid": os.getpid(), "pgid": os.getpgid(0)}
    message = {"type": "check_result", "check": check, "device": "cpu", "device_name": "stand-in", "tool": "stand-in",
               "started": began, "finished": time.time(), "evidence": evidence}  # fmt: skip
    line({**message, "error": error} if error else message)


def interrupted(signum: int, frame: object) -> None:
    result(f"interrupted by {signal.Signals(signum).name} after {time.time() - began:.1f} s")
    sys.exit(3)


signal.signal(signal.SIGTERM, interrupted)
if marker := params.get("marker"):
    with open(marker, "a") as runs:
        runs.write(f"{os.environ['CP_COMMAND_KEY']} {os.getpid()}\n")
if params.get("child"):
    subprocess.Popen(["sleep", "600"])
if params.get("bad_line"):
    print("this is not a protocol line", flush=True)
sys.stderr.write("x" * int(params.get("stderr_chars", 0)) + "stand-in done with its stderr\n")
sys.stderr.flush()
steps = int(params.get("steps", 2))
for step in range(steps):
    line({"type": "check_progress", "check": check, "fraction": step / steps, "step": f"step {step}"})
    time.sleep(float(params.get("sleep_s", 0)) / steps)
line({"type": "check_log", "check": check, "level": "info", "message": "stand-in finished its steps"})
result()
sys.exit(int(params.get("exit", 0)))
