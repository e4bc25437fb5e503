"""A distribution of this checkout (the agent's, cpctl's) built into a wheel and installed alone in a
fresh virtual environment, without pip or a network: what a machine that installs only it would hold."""

import shutil
import subprocess
import sys
import venv
from pathlib import Path


def venv_with_wheel(project: Path, work: Path) -> Path:
    """Build ``project`` (a directory with its pyproject.toml) into a wheel and install that wheel, with no
    dependency, into a new venv under ``work``; return the venv's directory."""
    source = work / project.name
    shutil.copytree(project, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", work / "dist", source],
        check=True,
        capture_output=True,
    )
    (wheel,) = (work / "dist").glob("*.whl")
    target = work / "venv"
    venv.create(target, with_pip=False)
    python = target / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel],
        check=True,
        capture_output=True,
    )
    return target
