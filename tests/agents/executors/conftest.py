import io
import json
from pathlib import Path

import pytest

from agents.executors.__main__ import run
from agents.executors.checks import CHECKS
from agents.executors.reporter import Reporter
from agents.protocol import CheckResult, decode_check_line

FIXTURES = Path(__file__).parent / "fixtures"
REPO_ROOT = Path(__file__).resolve().parents[3]


class Ran:
    """A check run in this process: its result, exit code and every line it wrote."""

    def __init__(self, result: CheckResult, code: int, out: bytes) -> None:
        self.result = result
        self.code = code
        self.lines = [decode_check_line(line) for line in out.splitlines()]

    def named(self, name: str, **where) -> list:
        return [
            m for m in self.result.measurements if m.name == name and all(getattr(m, k) == v for k, v in where.items())
        ]


@pytest.fixture
def run_check():
    def go(check: str, params: dict | None = None, **facilities) -> Ran:
        out = io.BytesIO()
        reporter = Reporter(CHECKS[check].name, out, interval_s=0)
        facilities.setdefault("open_collector", lambda: None)  # this machine has no NVML
        result, code = run(check, json.dumps(params) if params is not None else None, reporter, **facilities)
        return Ran(result, code, out.getvalue())

    return go


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()
