"""Layers point down: no app imports an app of a higher layer (or one beside it), and apps/core, the
bottom, imports none. The layers are written out here, so that a new app has to be placed in one."""

import ast
from pathlib import Path

import pytest

APPS = Path(__file__).resolve().parents[2] / "apps"

# Bottom first. Apps in one layer do not import each other.
LAYERS: list[set[str]] = [
    {"core"},
    {"accounts"},
    {"inventory"},
    {"telemetry", "costs"},
    {"failures", "jobs"},
    {"burnin"},
    {"gateway"},
    {"dashboard"},
]
LAYER_OF = {app: level for level, apps in enumerate(LAYERS) for app in apps}


def imported_apps(path: Path) -> set[str]:
    """The project apps a module imports, at its top or inside a function."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return {module.split(".")[1] for module in modules if module.startswith("apps.") and module.count(".") >= 1}


def sources(app: str) -> list[Path]:
    return sorted(p for p in (APPS / app).rglob("*.py") if "migrations" not in p.parts)


def test_every_app_has_a_layer():
    assert {p.name for p in APPS.iterdir() if (p / "apps.py").exists() or p.name == "core"} == set(LAYER_OF)


@pytest.mark.parametrize("app", sorted(LAYER_OF))
def test_an_app_imports_only_the_layers_below_it(app):
    found = sources(app)
    assert found  # the walk found the package
    upward = {
        f"{path.relative_to(APPS)} imports apps.{other}"
        for path in found
        for other in imported_apps(path)
        if other != app and LAYER_OF.get(other, len(LAYERS)) >= LAYER_OF[app]
    }
    assert upward == set()
