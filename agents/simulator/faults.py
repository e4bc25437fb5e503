"""Faults for the simulated fleet, and the small text format that scripts them.

One fault per entry; entries are separated by newlines, commas or spaces, ``#`` starts a comment,
and a leading ``- `` is ignored (so a YAML list of the same strings reads the same)::

    gpu-003:gpu2:xid79@120        GPU 2 of gpu-003 falls off the bus 120 s in
    gpu-007:straggler:gpu5        GPU 5 of gpu-007 is a straggler from the start
    gpu-010:die@300               gpu-010 dies 300 s in
    gpu-004:thermal@60+600:gpu1   GPU 1 overheats from 60 s to 660 s
    gpu-002:flap@30:mlx5_3        mlx5_3 on gpu-002 starts flapping 30 s in
    gpu-006:x8:gpu4               GPU 4's PCIe link trains at x8: host↔device bandwidth halves
    *:xid48~0.5/h                 on every node, a double-bit ECC error twice an hour on average

An entry is ``HOST:PART[:PART...]``: HOST is a hostname or ``*`` (every node); one part is the
fault, with ``@SECONDS`` (scripted: that long after the simulation starts) or ``~RATE/h`` (random:
a Poisson process with that many per hour), and for a lasting condition ``+SECONDS`` (how long; it
lasts for good without); the other part names the target, ``gpuN`` or a port device (``mlx5_3``),
and may be left out: then the simulator picks one, the same one for the same seed.
"""

import re
from dataclasses import dataclass
from typing import Final, Literal

FaultKind = Literal[
    "xid79", "xid48", "xid94", "xid95", "xid63", "xid64", "xid74", "thermal", "straggler", "x8", "flap", "die"
]  # fmt: skip

# What each fault does, for the error messages and the docs.
FAULTS: Final[dict[str, str]] = {
    "xid79": "the GPU falls off the bus (XID 79) and disappears",
    "xid48": "a double-bit ECC error (XID 48)",
    "xid94": "a contained uncorrectable ECC error (XID 94)",
    "xid95": "an uncontained uncorrectable ECC error (XID 95)",
    "xid63": "row remapping pending (XID 63)",
    "xid64": "row remapping failed (XID 64)",
    "xid74": "an NVLink error (XID 74)",
    "thermal": "the GPU's cooling fails: it heats up and throttles",
    "straggler": "the GPU draws ~50 W less than its siblings and clocks lower",
    "x8": "the GPU's PCIe link trains at x8 of its x16 (a badly seated card or riser): host↔device bandwidth halves",
    "flap": "an InfiniBand link flaps between down and active",
    "die": "the node dies: its agent goes silent",
}
GPU_FAULTS: Final = frozenset(
    {"xid79", "xid48", "xid94", "xid95", "xid63", "xid64", "xid74", "thermal", "straggler", "x8"}
)
PORT_FAULTS: Final = frozenset({"flap"})
CONDITIONS: Final = frozenset({"thermal", "straggler", "flap"})  # last a while, the rest happen once

_HOST = re.compile(r"^(\*|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$")
_FAULT = re.compile(r"^(?P<kind>[a-z]+\d*)(?:(?P<timing>[@~])(?P<when>[^+]*))?(?:\+(?P<duration>.*))?$")
_GPU = re.compile(r"^gpu(\d+)$")
_PORT = re.compile(r"^[a-z][a-z0-9_]*\d$")
_RATE = re.compile(r"^(?P<rate>[0-9.]+)/h$")
EXAMPLE: Final = "gpu-003:gpu2:xid79@120"
_KINDS: Final = ", ".join(sorted(FAULTS))
MAX_RATE_PER_HOUR: Final = 3600.0  # once a second on average: the sampling rate


class FaultSpecError(ValueError):
    """A fault entry that cannot be understood; the message names the entry and what is wrong."""


@dataclass(frozen=True)
class FaultSpec:
    host: str  # a hostname, or "*" for every node
    kind: FaultKind
    gpu: int | None = None
    port: str | None = None
    at_s: float | None = None  # scripted; with neither this nor a rate it starts at once
    rate_per_hour: float | None = None  # random
    duration_s: float | None = None  # a condition's length; None: for good
    text: str = ""  # the entry as written

    def applies_to(self, hostname: str) -> bool:
        return self.host in ("*", hostname)

    def __str__(self) -> str:
        return self.text or f"{self.host}:{self.kind}"


def parse_fault_spec(text: str) -> list[FaultSpec]:
    """Every entry of ``text``, or FaultSpecError for the first one that is wrong."""
    specs: list[FaultSpec] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip().removeprefix("- ")
        specs.extend(parse_fault(entry) for entry in re.split(r"[\s,;]+", line) if entry)
    return specs


class _Problem(Exception):
    """What is wrong with an entry; parse_fault adds which entry."""


def parse_fault(entry: str) -> FaultSpec:
    try:
        return _parse(entry)
    except _Problem as problem:
        raise FaultSpecError(f"Fault {entry!r}: {problem}") from None


def _parse(entry: str) -> FaultSpec:
    host, colon, rest = entry.partition(":")
    if not colon or not rest:
        raise _Problem(f"expected HOST:FAULT (for example {EXAMPLE}).")
    if not _HOST.match(host):
        raise _Problem(f"{host!r} is not a hostname or '*'.")
    fault: re.Match[str] | None = None
    targets: list[str] = []
    for part in rest.split(":"):
        match = _FAULT.match(part)
        if match and match["kind"] in FAULTS:
            if fault is not None:
                raise _Problem(f"names two faults ({fault['kind']}, {match['kind']}); write one per entry.")
            fault = match
        elif (_GPU.match(part) or _PORT.match(part)) and not part.startswith("xid"):
            targets.append(part)
        else:
            raise _Problem(f"unknown fault {match['kind'] if match else part!r}; expected one of {_KINDS}.")
    if fault is None:
        raise _Problem(f"names no fault; expected one of {_KINDS}.")
    if len(targets) > 1:
        raise _Problem(f"names two targets ({', '.join(targets)}); write one per entry.")
    kind = fault["kind"]
    gpu, port = _target(kind, targets[0] if targets else None)
    at_s, rate = _timing(fault["timing"], fault["when"])
    return FaultSpec(
        host=host,
        kind=kind,  # type: ignore[arg-type]  # one of FAULTS, checked above
        gpu=gpu,
        port=port,
        at_s=at_s,
        rate_per_hour=rate,
        duration_s=_duration(kind, fault["duration"]),
        text=entry,
    )


def _target(kind: str, target: str | None) -> tuple[int | None, str | None]:
    if target is None:
        return None, None
    if kind == "die":
        raise _Problem("die takes the whole node; it names no GPU or port.")
    gpu = _GPU.match(target)
    if kind in GPU_FAULTS and not gpu:
        raise _Problem(f"{kind} happens to a GPU; name one as gpuN, not {target!r}.")
    if kind in PORT_FAULTS and gpu:
        raise _Problem(f"{kind} happens to a network port; name one as mlx5_N, not {target!r}.")
    return (int(gpu[1]), None) if gpu else (None, target)


def _timing(timing: str | None, when: str | None) -> tuple[float | None, float | None]:
    if timing == "@":
        seconds = _seconds(when or "")
        if seconds is None:
            raise _Problem(f"'@{when}' is not a time in seconds after the start (for example @120).")
        return seconds, None
    if timing == "~":
        match = _RATE.match(when or "")
        rate = _seconds(match["rate"]) if match else None
        if not rate or rate > MAX_RATE_PER_HOUR:
            raise _Problem(
                f"'~{when}' is not a rate per hour above zero and at most {MAX_RATE_PER_HOUR:.0f} (for example ~0.5/h)."
            )
        return None, rate
    return None, None


def _duration(kind: str, text: str | None) -> float | None:
    if text is None:
        return None
    if kind not in CONDITIONS:
        raise _Problem(f"{kind} happens once; it takes no duration ('+{text}').")
    seconds = _seconds(text)
    if not seconds:
        raise _Problem(f"'+{text}' is not a duration in seconds above zero (for example +600).")
    return seconds


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value < float("inf") else None
