"""Host facts (kernel, OS, CPU, memory) read from /proc, /etc and the platform module.

Each fact that cannot be read is absent rather than guessed: an agent on an unusual host (a container
without /etc/os-release, an Arm CPU whose /proc/cpuinfo has no model name) still reports the rest.
"""

import os
import platform
import re
import socket
from pathlib import Path

from agents.protocol import HostFacts

SHORT_TEXT_MAX = 128  # agents.protocol.ShortText
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def short_text(text: str | None) -> str | None:
    """Text cut to what the protocol's short text fields accept; empty text is absent."""
    if text is None:
        return None
    text = text.strip()
    return text[:SHORT_TEXT_MAX] or None


def valid_hostname(hostname: str | None = None) -> str:
    """``hostname`` (default: this machine's), or ValueError saying why the server would refuse it."""
    name = hostname if hostname is not None else socket.gethostname()
    if len(name) > 253 or not _HOSTNAME.match(name):
        raise ValueError(
            f"Hostname {name!r} is not a valid DNS name (letters, digits, '.' and '-'); "
            "give the agent a hostname explicitly."
        )
    return name


def read_host_facts(
    hostname: str | None = None,
    *,
    driver_version: str | None = None,
    cuda_version: str | None = None,
    root: Path = Path("/"),
) -> HostFacts:
    """Facts about this host; ``root`` is injectable so tests can point it at a fake tree."""
    return HostFacts(
        hostname=valid_hostname(hostname),
        driver_version=short_text(driver_version),
        cuda_version=short_text(cuda_version),
        kernel=short_text(platform.release()),
        os=short_text(_os_pretty_name(root)),
        cpu_model=short_text(_cpu_model(root)),
        cpu_count=os.cpu_count(),
        memory_gib=_memory_gib(root),
    )


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _os_pretty_name(root: Path) -> str | None:
    text = _read_text(root / "etc/os-release") or _read_text(root / "usr/lib/os-release")
    for line in (text or "").splitlines():
        key, _, value = line.partition("=")
        if key == "PRETTY_NAME":
            return value.strip().strip('"')
    return None


def _cpu_model(root: Path) -> str | None:
    for line in (_read_text(root / "proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value
    return platform.processor() or None


def _memory_gib(root: Path) -> float | None:
    for line in (_read_text(root / "proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            try:
                return round(int(line.split()[1]) / (1024 * 1024), 1)  # the kernel counts kB (KiB)
            except (IndexError, ValueError):
                return None
    return None
