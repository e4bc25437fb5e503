"""``python -m agents.executors``: one process per check, protocol lines only on stdout, a result
always; and the agent without torch."""

import json
import subprocess
import sys

from agents.protocol import CheckResult, decode_check_line
from tests.agents.executors.conftest import REPO_ROOT

# Runs the check CLI in a Python where torch cannot be imported, as on a node without the extra.
WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None
from agents.executors.__main__ import main
sys.exit(main(sys.argv[1:]))
"""
IMPORT_EVERY_EXECUTOR_MODULE = """
import importlib, pkgutil, sys
sys.modules["torch"] = None
import agents.executors, agents.simulator.checks
for module in pkgutil.walk_packages(agents.executors.__path__, "agents.executors."):
    importlib.import_module(module.name)
print("imported")
"""


def check_process(*args: str, program: list[str] | None = None) -> subprocess.CompletedProcess:
    command = program or ["-m", "agents.executors"]
    return subprocess.run(
        [sys.executable, *command, *args], cwd=REPO_ROOT, capture_output=True, timeout=120, check=False
    )


def last_result(stdout: bytes) -> CheckResult:
    lines = [decode_check_line(line) for line in stdout.splitlines()]  # every line is a protocol line
    assert isinstance(lines[-1], CheckResult)
    return lines[-1]


def test_a_check_that_needs_torch_says_it_is_missing():
    ran = check_process("compute", "--params", "{}", program=["-c", WITHOUT_TORCH])

    result = last_result(ran.stdout)
    assert ran.returncode == 3
    assert result.error.startswith("torch is not installed")
    assert "gpu-controlplane-agent[burnin]" in result.error
    assert result.passed is None


def test_every_executor_module_imports_without_torch():
    ran = check_process(program=["-c", IMPORT_EVERY_EXECUTOR_MODULE])

    assert ran.returncode == 0, ran.stderr.decode()
    assert ran.stdout.strip() == b"imported"


def test_bad_parameters_still_give_a_result_naming_the_field():
    ran = check_process("storage", "--params", json.dumps({"size_bytes": 12, "colour": "red"}))

    result = last_result(ran.stdout)
    assert ran.returncode == 2
    assert result.check == "storage"
    assert "bad parameters for StorageParams" in result.error
    assert "size_bytes" in result.error or "colour" in result.error


def test_an_unknown_check_is_a_usage_error():
    ran = check_process("divination")

    assert ran.returncode == 2
    assert ran.stdout == b""
    assert b"invalid choice: 'divination'" in ran.stderr


def test_what_libraries_print_goes_to_stderr_not_into_the_protocol(tmp_path):
    noisy = (
        "import sys\n"
        "import agents.executors.storage as storage\n"
        "real = storage.bypass_page_cache\n"
        "def chatty(*args):\n"
        "    print('a library talking on stdout')\n"
        "    return real(*args)\n"
        "storage.bypass_page_cache = chatty\n"
        "from agents.executors.__main__ import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    params = json.dumps({"directory": str(tmp_path), "size_bytes": 1 << 20, "block_bytes": 1 << 20})

    ran = check_process("storage", "--params", params, program=["-c", noisy])

    assert last_result(ran.stdout).error is None
    assert b"a library talking on stdout" in ran.stderr
