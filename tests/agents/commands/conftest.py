import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agents.commands.runner import SubprocessRunner
from agents.protocol import Command

STANDIN = Path(__file__).with_name("standin_check.py")
PROGRAM = (sys.executable, str(STANDIN))


def command(key: str = "k-1", *, check: str = "storage", time_limit_s: int = 60, **fields: object) -> Command:
    return Command(key=key, check=check, time_limit_s=time_limit_s, deadline=time.time() + 3600, **fields)


@pytest.fixture
def runner() -> SubprocessRunner:
    return SubprocessRunner(PROGRAM, grace_s=2.0)


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """The file each stand-in run appends its key to: how many times a command really ran."""
    return tmp_path / "runs.txt"


def runs(marker: Path) -> list[str]:
    return [line.split()[0] for line in marker.read_text().splitlines()] if marker.exists() else []


def group_members(pgid: int) -> list[int]:
    """The living processes of a process group, from /proc (zombies, already dead, left out)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


Relayed = list[object]
Started = Callable[[int | None], None]
