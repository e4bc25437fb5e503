"""The agent installs alone: its wheel needs msgspec, websockets and nvidia-ml-py, nothing of the
server's, and ``cp-agent`` runs in a fresh virtual environment that has no Django at all."""

import importlib.util
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.packaging import venv_with_wheel

AGENTS = Path(__file__).resolve().parents[2] / "agents"
AGENT_DEPENDENCIES = {"msgspec", "websockets", "nvidia-ml-py"}
# Where each dependency's importable package lives, to hand the fresh venv exactly these and no more.
IMPORT_NAMES = {"msgspec": "msgspec", "websockets": "websockets", "nvidia-ml-py": "pynvml"}


def requirement_names(requirements: list[str]) -> set[str]:
    return {requirement.split(">")[0].split("=")[0].split("[")[0].strip() for requirement in requirements}


def test_the_agent_distribution_declares_only_the_agents_dependencies():
    project = tomllib.loads((AGENTS / "pyproject.toml").read_text())["project"]

    assert project["name"] == "gpu-controlplane-agent"
    assert requirement_names(project["dependencies"]) == AGENT_DEPENDENCIES
    assert project["scripts"] == {"cp-agent": "agents.cli:main"}


def test_every_agent_subpackage_is_in_the_distribution():
    declared = set(tomllib.loads((AGENTS / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {"agents"} | {
        "agents." + ".".join(path.parent.relative_to(AGENTS).parts)
        for path in AGENTS.glob("*/**/__init__.py")
        if path.relative_to(AGENTS).parts[0] != "build"  # what an in-tree `pip install ./agents` leaves
    }

    assert on_disk <= declared


@pytest.fixture(scope="module")
def agent_venv(tmp_path_factory) -> Path:
    """A fresh venv with the agent's wheel installed --no-deps, plus its three dependencies only."""
    work = tmp_path_factory.mktemp("agent-install")
    target = venv_with_wheel(AGENTS, work)
    # The dependencies, from this environment, without a network: one directory holding just them.
    dependencies = work / "dependencies"
    dependencies.mkdir()
    for name in IMPORT_NAMES.values():
        spec = importlib.util.find_spec(name)
        location = Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin)
        (dependencies / location.name).symlink_to(location)
    site_packages = next(target.glob("lib/python3*/site-packages"))
    (site_packages / "agent-dependencies.pth").write_text(f"{dependencies}\n")
    return target


def test_the_wheel_requires_exactly_the_agents_dependencies(agent_venv):
    metadata = next(agent_venv.glob("lib/python3*/site-packages/gpu_controlplane_agent-*.dist-info/METADATA"))
    requires = [
        line.split(":", 1)[1].strip() for line in metadata.read_text().splitlines() if line.startswith("Requires-Dist:")
    ]

    assert requirement_names([r for r in requires if "extra ==" not in r]) == AGENT_DEPENDENCIES


def test_cp_agent_runs_from_the_fresh_venv_without_django(agent_venv):
    check = (
        "import importlib.util, sys\n"
        "import agents.cli, agents.agent, agents.transport, agents.buffer, agents.simulator.fleet\n"
        "assert importlib.util.find_spec('django') is None, 'Django is importable'\n"
        "assert not any(m.split('.')[0] in {'django', 'celery', 'psycopg', 'rest_framework'} for m in sys.modules)\n"
        "print(agents.cli.__file__)\n"
    )
    imported = subprocess.run(
        [agent_venv / "bin" / "python", "-I", "-c", check], capture_output=True, text=True, check=False
    )
    version = subprocess.run(
        [agent_venv / "bin" / "cp-agent", "--version"], capture_output=True, text=True, check=False
    )

    assert imported.returncode == 0, imported.stderr
    assert str(agent_venv) in imported.stdout  # the installed copy, not this checkout
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("cp-agent ")


def test_the_systemd_unit_ships_inside_the_package(agent_venv):
    unit = next(agent_venv.glob("lib/python3*/site-packages/agents/packaging/cp-agent.service")).read_text()

    assert "Restart=always" in unit
    assert "StateDirectory=cp-agent" in unit
    assert "User=cp-agent" in unit
    assert "DeviceAllow=char-nvidia-frontend rw" in unit


def test_the_wheel_holds_no_tests_or_build_files(agent_venv):
    wheel = next((agent_venv.parent / "dist").glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()

    assert not [n for n in names if n.startswith("agents/") and not n.endswith((".py", ".service"))]
