"""A launcher under test as a terminal runs one: a real process in a process group of its own (the
group ``make`` and its child are in), its output collected line by line."""

import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


class Launched:
    def __init__(
        self, argv: list[str], env: Mapping[str, str] | None = None, *, executable: str = sys.executable
    ) -> None:
        self.process = subprocess.Popen(
            [executable, *argv],
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            process_group=0,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def signal_group(self, number: int) -> None:
        """As systemd, ``timeout`` or a terminal's Ctrl-C signal it: the launcher's whole group."""
        os.killpg(self.process.pid, number)

    def signal_launcher(self, number: int) -> None:
        """As ``make`` forwards a signal: to the launcher alone."""
        self.process.send_signal(number)
