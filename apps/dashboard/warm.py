"""What the dashboard's first page view after a start would otherwise pay for: compiling its
templates (the cached loader compiles each on first use) and the URL resolver's reverse lookups
that every ``{% url %}`` needs. Measured on the fleet page: a process's first view took ~300 ms of a
quiet machine against ~35 ms for the next, and a second or more beside 1,000 agents' ingest.
controlplane/asgi.py calls ``warm_pages()`` as each server process starts."""

from pathlib import Path

from django.template.loader import get_template
from django.urls import reverse

TEMPLATES = Path(__file__).resolve().parent / "templates"


def page_templates() -> list[str]:
    """Every dashboard template by the name a view or an include loads it by."""
    return sorted(path.relative_to(TEMPLATES).as_posix() for path in TEMPLATES.rglob("*.html"))


def warm_pages() -> None:
    for name in page_templates():
        get_template(name)
    reverse("dashboard:fleet")  # fills the root's and the dashboard namespace's reverse lookups
