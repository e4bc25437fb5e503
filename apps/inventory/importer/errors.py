"""What an import reports when it refuses a document: every problem found, each with the path of the
record and field it concerns, e.g. ``nodes[3] (gpu-004).gpus[2].uuid``."""

import difflib
from collections.abc import Iterable

import msgspec

# Where a problem concerns the document as a whole (its syntax, its top level).
DOCUMENT = "document"


class Issue(msgspec.Struct, frozen=True):
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ImportFailed(Exception):
    """The document was refused; nothing was written."""

    def __init__(self, issues: list[Issue]) -> None:
        count = f"{len(issues)} problem" + ("" if len(issues) == 1 else "s")
        super().__init__(f"{count} in the inventory document; nothing was imported.")
        self.issues = issues


def record_path(section: str, index: int, label: str | None) -> str:
    """``nodes[3] (gpu-004)``: the position a parser reports and the name a person searches for."""
    return f"{section}[{index}] ({label})" if label else f"{section}[{index}]"


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'gpu-001'?)``, or nothing when no candidate is close."""
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
