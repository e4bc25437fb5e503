"""What cpctl prints: tables for people, JSON for scripts, and a run's progress (a bar that redraws
itself on a terminal, a plain line per change when piped)."""

import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

Column = tuple[str, Callable[[dict[str, Any]], Any]]
BAR_WIDTH = 30


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value).replace("\n", " ")


def table(stream: TextIO, rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> None:
    cells = [[name.upper() for name, _ in columns], *[[cell(get(row)) for _, get in columns] for row in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        stream.write("  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip() + "\n")


def fields(stream: TextIO, row: dict[str, Any], names: Sequence[str]) -> None:
    width = max(len(name) for name in names)
    for name in names:
        stream.write(f"{name.ljust(width)}  {cell(row.get(name))}\n")


def as_json(stream: TextIO, value: Any) -> None:
    stream.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def counts_text(counts: dict[str, int]) -> str:
    return " ".join(f"{state} {count}" for state, count in counts.items() if count)


class Progress:
    """A run's progress as it is polled: on a terminal one line redrawn in place, ``[####....] 42%``;
    piped, a line each time what it says changes, so a log shows every step and nothing twice."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""

    def show(self, label: str, run: dict[str, Any]) -> None:
        fraction = 1.0 if run["state"] in ("succeeded", "failed", "cancelled") else float(run["progress"])
        text = f"{label} {run['state']} {fraction:4.0%}  {counts_text(run['commands'])}"
        if self.tty:
            filled = round(fraction * BAR_WIDTH)
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            self.stream.write(f"\r\x1b[K[{bar}] {text}")
            self.stream.flush()
        elif text != self.last:
            self.stream.write(text + "\n")
            self.stream.flush()
        self.last = text

    def done(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()
