"""InfiniBand and RoCE ports, read from ``/sys/class/infiniband/<device>/ports/<n>/``.

Discovery reads each port's rate, state, physical state and link layer (``Ethernet`` means RoCE) and
its GUID. A sample adds the data counters, as bytes and as Gb/s, and the error counters.
``port_xmit_data`` and ``port_rcv_data`` count 4-byte words, so bytes = words × 4 (as node_exporter
reports them) and Gb/s = Δwords × 4 × 8 / 10⁹ / Δt; the first sample of a port has no rate yet, and a
counter that went backwards (a reset, an HCA reload) gives no rate for that sample rather than a
negative or enormous one. A saturated 32-bit counter (an HCA without extended counters) gives neither:
it no longer counts. A file that is missing or holds garbage makes its
field absent; nothing here raises on a strange sysfs tree.

A port's state change, and any increase of its ``link_downed`` counter (a flap shorter than the
sampling interval shows only there), becomes a ``port`` event.
"""

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agents.collectors.hostfacts import short_text
from agents.protocol import Gbps, GpuEvent, PortInfo, PortSample, PortState, range_of

log = logging.getLogger(__name__)

SYSFS_ROOT: Final = Path("/sys/class/infiniband")
GBPS: Final = range_of(Gbps)
LEGACY_COUNTER_MAX: Final = 2**32 - 1  # 32-bit PMA counters stop (saturate) here instead of wrapping
_BITS_PER_WORD: Final = 4 * 8

_LOGICAL_STATES: Final[dict[str, PortState]] = {
    "DOWN": "down",
    "INIT": "init",
    "ARMED": "init",  # configured, waiting for the subnet manager to activate it
    "ACTIVE": "active",
    "ACTIVE_DEFER": "active",
}
_GUID: Final = re.compile(r"^[0-9a-f]{4}(:[0-9a-f]{4}){3}$")


def parse_rate(text: str | None) -> float | None:
    """``"400 Gb/sec (4X NDR)"`` → 400.0."""
    try:
        rate = float((text or "").split()[0])
    except (IndexError, ValueError):
        return None
    return rate if rate in GBPS else None


def parse_state(text: str | None, physical: str | None) -> PortState:
    """``"4: ACTIVE"`` → ``"active"``; a down port whose physical layer is polling is ``"polling"``
    (cable in, no partner answering)."""
    text = text or ""
    name = (text.partition(":")[2] if ":" in text else text).strip().upper()
    state = _LOGICAL_STATES.get(name, "unknown")
    if state == "down" and (physical or "").lower() == "polling":
        return "polling"
    return state


def parse_physical_state(text: str | None) -> str | None:
    """``"5: LinkUp"`` → ``"LinkUp"``."""
    if not text:
        return None
    _, colon, name = text.partition(":")
    return short_text(name if colon else text)


def _read(path: str | Path) -> str | None:
    try:
        with open(path, "rb", buffering=0) as file:
            return file.read(256).decode("ascii", errors="replace").strip()
    except OSError:
        return None


def _read_counter(path: str) -> int | None:
    text = _read(path)
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value < 2**63 else None


def _guid(text: str | None) -> str | None:
    text = (text or "").strip().lower()
    return text if _GUID.match(text) and text != "0000:0000:0000:0000" else None


def port_event(previous: PortSample | None, current: PortSample, now: float) -> GpuEvent | None:
    """The event a port's change between two samples makes, if any (shared with the simulator): the
    transition in the event's typed fields, and said in its text for people."""
    if previous is None:
        return None
    changed_from = previous.state if previous.state != current.state else None
    before, after = previous.link_downed, current.link_downed
    downs = after - before if before is not None and after is not None and after > before else None
    if changed_from is None and downs is None:
        return None
    changes = []
    if changed_from is not None:
        changes.append(f"state {changed_from} → {current.state}")
    if downs is not None:
        changes.append(f"link went down {downs} time{'s' if downs > 1 else ''}")
    return GpuEvent(
        ts=now,
        kind="port",
        port_device=current.device,
        port=current.port,
        port_state=current.state,
        previous_port_state=changed_from,
        link_downs=downs,
        data=f"{current.device} port {current.port}: {'; '.join(changes)}",
    )


_SAMPLED_FILES: Final = (
    "state",
    "phys_state",
    "rate",
    "counters/port_xmit_data",
    "counters/port_rcv_data",
    "counters/symbol_error",
    "counters/link_downed",
    "counters/port_rcv_errors",
)


@dataclass
class _Port:
    device: str
    number: int
    path: Path
    words: tuple[int, int, float] | None = None  # xmit, rcv and when, from the previous sample
    last: PortSample | None = None

    def __post_init__(self) -> None:
        # Joined once: the 1 s loop reads these eight files of every port.
        self.files = tuple(str(self.path / name) for name in _SAMPLED_FILES)


class InfiniBandCollector:
    """The host's InfiniBand and RoCE ports. ``root`` is injectable so tests can give a fake tree."""

    def __init__(self, root: Path = SYSFS_ROOT) -> None:
        self._root = Path(root)
        self._ports: dict[tuple[str, int], _Port] = {}
        self._events: list[GpuEvent] = []
        self._enumerate()

    def _enumerate(self) -> None:
        found: dict[tuple[str, int], _Port] = {}
        for device in _listdir(self._root):
            for number in _listdir(self._root / device / "ports"):
                if number.isdigit() and 1 <= int(number) <= 255 and 1 <= len(device) <= 32:
                    key = (device, int(number))
                    path = self._root / device / "ports" / number
                    found[key] = self._ports.get(key) or _Port(device, int(number), path)
        self._ports = found

    def discover(self) -> list[PortInfo]:
        self._enumerate()
        return [self._describe(port) for port in self._ports.values()]

    def _describe(self, port: _Port) -> PortInfo:
        physical = _read(port.path / "phys_state")
        link_layer = (_read(port.path / "link_layer") or "").lower()
        return PortInfo(
            device=port.device,
            port=port.number,
            kind="roce" if link_layer == "ethernet" else "infiniband",
            rate_gbps=parse_rate(_read(port.path / "rate")) or 0.0,  # the protocol requires one; 0 = unreadable
            state=parse_state(_read(port.path / "state"), parse_physical_state(physical)),
            physical_state=parse_physical_state(physical),
            guid=self._port_guid(port, link_layer),
        )

    def _port_guid(self, port: _Port, link_layer: str) -> str | None:
        if link_layer != "ethernet":  # an IB port's GUID is the low half of its first GID
            gid = _read(port.path / "gids" / "0") or ""
            guid = _guid(":".join(gid.split(":")[4:]))
            if guid:
                return guid
        return _guid(_read(self._root / port.device / "node_guid"))

    def sample(self, now: float) -> list[PortSample]:
        samples = []
        for port in self._ports.values():
            sample = self._sample_port(port, now)
            if sample is None:
                continue
            event = port_event(port.last, sample, now)
            if event is not None:
                self._events.append(event)
            port.last = sample
            samples.append(sample)
        return samples

    def _sample_port(self, port: _Port, now: float) -> PortSample | None:
        state, physical, rate, xmit_words, rcv_words, symbol_errors, link_downed, rcv_errors = port.files
        state_text = _read(state)
        if state_text is None and not port.path.exists():
            return None  # the HCA went away; discovery will say so
        xmit, rcv = _read_counter(xmit_words), _read_counter(rcv_words)
        tx_gbps, rx_gbps = self._rates(port, xmit, rcv, now)
        return PortSample(
            device=port.device,
            port=port.number,
            state=parse_state(state_text, parse_physical_state(_read(physical))),
            rate_gbps=parse_rate(_read(rate)),
            tx_gbps=tx_gbps,
            rx_gbps=rx_gbps,
            symbol_errors=_read_counter(symbol_errors),
            link_downed=_read_counter(link_downed),
            rcv_errors=_read_counter(rcv_errors),
            tx_bytes=_bytes(xmit),
            rx_bytes=_bytes(rcv),
        )

    @staticmethod
    def _rates(port: _Port, xmit: int | None, rcv: int | None, now: float) -> tuple[float | None, float | None]:
        previous = port.words
        if xmit is None or rcv is None:
            port.words = None
            return None, None
        port.words = (xmit, rcv, now)
        if previous is None:
            return None, None
        elapsed = now - previous[2]
        return _gbps(previous[0], xmit, elapsed), _gbps(previous[1], rcv, elapsed)

    def drain_events(self) -> list[GpuEvent]:
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        self._ports.clear()


def _bytes(words: int | None) -> int | None:
    if words is None or words == LEGACY_COUNTER_MAX or words * 4 >= 2**63:
        return None
    return words * 4


def _gbps(before: int, after: int, elapsed: float) -> float | None:
    if elapsed <= 0 or after < before or after == LEGACY_COUNTER_MAX:
        return None  # reset, reload or a saturated 32-bit counter: no honest rate this time
    rate = (after - before) * _BITS_PER_WORD / 1e9 / elapsed
    return rate if rate in GBPS else None


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path), key=lambda name: (len(name), name))  # mlx5_2 before mlx5_10
    except OSError:
        return []
