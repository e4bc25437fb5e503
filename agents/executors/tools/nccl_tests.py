"""nccl-tests (``all_reduce_perf``, ``all_gather_perf``, ...): its text output, parsed by header.

The result table is found by its header line (the ``#`` line naming ``size``, ``count`` and
``busbw``), and each row is read by the names the header gives its columns, never by position,
because the columns changed over the releases:

- before 2.13 there was no ``root`` column, and the per-row check column was ``error`` (the largest
  difference from the expected values, as ``5e-07``) instead of ``#wrong`` (a count of wrong
  elements);
- ``-C 1`` names the time column ``cputime``; ``-I 1`` adds per-iteration columns (``i_min``,
  ``i_max``, ``i_p99``, ``i_cv%``) to both halves; ``-S 1`` adds a ``timestamp`` column whose value
  is two words (date and time);
- a row has two halves, out-of-place then in-place, each time, algbw, busbw and the check column;
  the check column says ``N/A`` when checking is off (``-c 0``); a trace-replay row leaves the
  out-of-place half blank;
- ``#`` lines are comments, including the footer's ``Out of bounds values : 0 OK`` and ``Avg bus
  bandwidth : 123.45``, which very old releases printed without the ``#``; lines of NCCL's own log
  (``host:pid:tid [0] NCCL INFO ...``) can appear anywhere and are not rows.

Bandwidths are GB/s (10⁹ bytes a second) and times microseconds, as nccl-tests prints them.
"""

import math
import re
from dataclasses import dataclass, field
from typing import Final

_FOOTER_BOUNDS: Final = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)")
_FOOTER_AVG: Final = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)")
_VERSION: Final = re.compile(r"^#\s*nccl-tests version (\S+)")
_DEVICE: Final = re.compile(r"^#\s+Rank\s+\d+ .*device\s+\d+")
_CHECK_COLUMNS: Final = ("#wrong", "error")
_TIME_COLUMNS: Final = ("time", "cputime")
_INTEGER: Final = re.compile(r"^\d+$")


class NcclTestsOutputError(ValueError):
    """Output with no result table: the run failed before measuring; the message has its last words."""


@dataclass(frozen=True)
class Figures:
    """One half of a row (out-of-place or in-place)."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: float | None  # #wrong elements, or the older "error" (largest deviation); None: N/A


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None  # None in the older format, -1 for collectives without a root
    out_of_place: Figures | None
    in_place: Figures | None


@dataclass
class NcclTestsRun:
    rows: list[Row] = field(default_factory=list)
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None
    version: str | None = None
    check_column: str | None = None  # "#wrong", or "error" in the older format
    devices: list[str] = field(default_factory=list)
    skipped_lines: int = 0  # lines between the header and the footer that were not rows

    @property
    def wrong_elements(self) -> int | None:
        """Wrong elements over every row and both halves; None when nothing was checked (N/A, or the
        older format, which reports a deviation instead of a count)."""
        if self.check_column != "#wrong":
            return None
        counts = [half.wrong for row in self.rows for half in (row.out_of_place, row.in_place) if half]
        checked = [count for count in counts if count is not None]
        return int(sum(checked)) if checked else None


def parse(text: str) -> NcclTestsRun:
    run = NcclTestsRun()
    columns: list[str] | None = None
    for line in text.replace("\r", "\n").splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if _footer(stripped, run):
            continue
        if stripped.startswith("#"):
            if (version := _VERSION.match(stripped)) is not None:
                run.version = version[1]
            elif _DEVICE.match(stripped):
                run.devices.append(stripped.lstrip("# ").strip())
            elif _is_header(stripped):
                columns = _header_columns(stripped)
                names = [name.rpartition(".")[2] for name in columns]
                run.check_column = next((name for name in names if name in _CHECK_COLUMNS), None)
            continue
        if columns is None:
            continue
        row = _row(stripped.split(), columns)
        if row is None:
            run.skipped_lines += 1
        else:
            run.rows.append(row)
    if not run.rows:
        last = [line for line in text.splitlines() if line.strip()][-5:]
        raise NcclTestsOutputError("nccl-tests printed no result rows; it ended with: " + " | ".join(last)[:1500])
    return run


def _footer(line: str, run: NcclTestsRun) -> bool:
    if (bounds := _FOOTER_BOUNDS.match(line)) is not None:
        run.out_of_bounds = int(bounds[1])
        return True
    if (average := _FOOTER_AVG.match(line)) is not None:
        run.avg_busbw_gbps = _number(average[1])
        return True
    return False


def _is_header(line: str) -> bool:
    names = line.lstrip("#").split()
    return "size" in names and "count" in names and "busbw" in names


def _header_columns(line: str) -> list[str]:
    """The header's column names, each half's prefixed ``oop.`` (out-of-place) or ``ip.`` (in-place)."""
    names = line.lstrip("#").split()
    out, half = [], ""
    for name in names:
        if name in _TIME_COLUMNS:
            half = "ip." if half == "oop." else "oop."
        out.append(f"{half}{name}" if half and name != "timestamp" else name)
    return out


def _row(tokens: list[str], columns: list[str]) -> Row | None:
    if not tokens or not _INTEGER.match(tokens[0]):
        return None  # an NCCL log line, an error message
    if "timestamp" in columns and len(tokens) == len(columns) + 1:
        tokens = [*tokens[:-2], f"{tokens[-2]} {tokens[-1]}"]  # the date and the time are one column
    half = [name for name in columns if name.startswith("oop.")]
    if len(tokens) == len(columns) - len(half):  # trace replay: no out-of-place half
        columns = [name for name in columns if not name.startswith("oop.")]
    if len(tokens) != len(columns):
        return None
    value = dict(zip(columns, tokens, strict=True))
    try:
        return Row(
            size_bytes=int(value["size"]),
            count=int(value["count"]),
            dtype=value.get("type", ""),
            redop=value.get("redop", ""),
            root=int(value["root"]) if "root" in value else None,
            out_of_place=_figures(value, "oop."),
            in_place=_figures(value, "ip."),
        )
    except (KeyError, ValueError):
        return None


def _figures(value: dict[str, str], half: str) -> Figures | None:
    time = value.get(f"{half}time", value.get(f"{half}cputime"))
    if time is None:
        return None
    check = next((value[f"{half}{name}"] for name in _CHECK_COLUMNS if f"{half}{name}" in value), "N/A")
    figures = (_number(time), _number(value[f"{half}algbw"]), _number(value[f"{half}busbw"]))
    if None in figures:
        return None  # a nan the tool printed: no figure rather than a wrong one
    time_us, algbw, busbw = figures
    return Figures(time_us, algbw, busbw, None if check == "N/A" else _number(check))  # type: ignore[arg-type]


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None
