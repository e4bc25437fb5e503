"""cpctl installs without Django: it imports in a Python where no server package can be imported,
its own distribution (cpctl/pyproject.toml) declares no dependency, and the ``cpctl`` it installs in
a fresh virtual environment, with nothing else in it, talks to a live server."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from apps.accounts.roles import Role
from tests import factories
from tests.packaging import venv_with_wheel

ROOT = Path(__file__).resolve().parents[2]
CPCTL = ROOT / "cpctl"
SERVER_ONLY = ("django", "rest_framework", "celery", "channels", "redis", "psycopg", "agents", "apps", "controlplane")

IMPORT_EVERY_CPCTL_MODULE = f"""
import importlib, pkgutil, sys
for name in {SERVER_ONLY!r}:
    sys.modules[name] = None  # any import of it now raises ImportError
import cpctl
names = sorted(m.name for m in pkgutil.walk_packages(cpctl.__path__, "cpctl.") if m.name != "cpctl.__main__")
for name in names:
    importlib.import_module(name)
print(",".join(names))
"""


def test_every_cpctl_module_imports_without_django_or_the_servers_packages():
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERY_CPCTL_MODULE], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    on_disk = {f"cpctl.{path.stem}" for path in CPCTL.glob("*.py")} - {"cpctl.__init__", "cpctl.__main__"}
    assert set(result.stdout.strip().split(",")) == on_disk


def test_its_distribution_declares_no_dependency_and_the_cpctl_command():
    project = tomllib.loads((CPCTL / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == []
    assert project["scripts"] == {"cpctl": "cpctl.cli:main"}
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert server["scripts"]["cpctl"] == "cpctl.cli:main"


@pytest.fixture(scope="module")
def cpctl_venv(tmp_path_factory) -> Path:
    """A fresh venv holding cpctl's wheel and nothing else."""
    return venv_with_wheel(CPCTL, tmp_path_factory.mktemp("cpctl-install"))


def test_the_installed_cpctl_lists_nodes_from_a_live_server_with_no_django_in_its_venv(cpctl_venv, asgi_server, tokens):
    factories.node(factories.cluster("alpha"), factories.node_type(nics=1, gpus=1), "gpu-042")
    python = cpctl_venv / "bin" / "python"
    no_django = subprocess.run([python, "-c", "import django"], capture_output=True, check=False, cwd="/")
    assert no_django.returncode == 1

    env = {"PATH": os.environ["PATH"], "CPCTL_URL": asgi_server.origin, "CPCTL_TOKEN": tokens[Role.VIEWER]}
    listed = subprocess.run(
        [cpctl_venv / "bin" / "cpctl", "nodes", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",  # not the checkout, whose cpctl/ would be imported instead
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert [node["hostname"] for node in json.loads(listed.stdout)] == ["gpu-042"]
