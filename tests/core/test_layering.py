"""apps/core is the bottom layer: no module of it imports another app of the project."""

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "apps" / "core"


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def test_core_imports_no_other_app():
    sources = sorted(CORE.rglob("*.py"))
    assert sources  # the walk found the package
    imports = {
        f"{path.relative_to(CORE)}: {module}"
        for path in sources
        for module in imported_modules(path)
        if module.startswith("apps.") and not module.startswith("apps.core")
    }
    assert imports == set()
