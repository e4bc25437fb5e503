"""The agent installs on a GPU node without Django, Celery or a database driver: every module under
``agents/`` must import in a Python where those cannot be imported at all."""

import subprocess
import sys
from pathlib import Path

import agents

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = ("django", "rest_framework", "celery", "channels", "channels_redis", "psycopg", "psycopg2")

IMPORT_EVERY_AGENT_MODULE = f"""
import importlib, pkgutil, sys
for name in {SERVER_ONLY!r}:
    sys.modules[name] = None  # any import of it now raises ImportError
import agents
names = [m.name for m in pkgutil.walk_packages(agents.__path__, "agents.")]
for name in names:
    importlib.import_module(name)
leaked = sorted(n for n in sys.modules if n.split(".")[0] in {SERVER_ONLY!r} and sys.modules[n] is not None)
print(",".join(names), leaked, sep="\\n")
"""


def test_it_imports_every_agent_module_without_django_or_other_server_packages():
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERY_AGENT_MODULE],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    names, leaked = result.stdout.strip().splitlines()
    assert leaked == "[]"
    assert set(names.split(",")) == agent_modules()  # every one, nothing skipped
    assert {"agents.collectors.nvml", "agents.collectors.host", "agents.simulator.model"} <= agent_modules()


def agent_modules() -> set[str]:
    package = Path(agents.__path__[0])
    modules = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules - {"agents"}
