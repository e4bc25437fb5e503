"""XIDs from the kernel log: the NVIDIA driver writes every XID there, and it is the one record of
them that a process started after the fact can read (NVML's event set only reports what happens
while someone listens).

Lines look like this (the driver's format since R390; the pid/name part since R470)::

    NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:ab:00): 48, pid=2351, name=python, An uncorrectable double bit error ...
    NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): ...

``/dev/kmsg`` gives each record as ``PRIORITY,SEQ,MICROSECONDS,FLAGS;MESSAGE`` with the time in
microseconds since boot; continuation lines start with a space. Reading it needs permission
(``kernel.dmesg_restrict=0``, or the ``CAP_SYSLOG`` capability); without it the health check says
the kernel log was not read, rather than that it held no XIDs.
"""

import errno
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

KMSG: Final = Path("/dev/kmsg")
MAX_RECORDS: Final = 100_000  # the ring buffer is a few MB; this is far more than it holds
_XID: Final = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): (?P<xid>\d+),\s*(?P<text>.*)"
)
_PID: Final = re.compile(r"^pid=[^,]*, name=[^,]*, ")


@dataclass(frozen=True)
class XidRecord:
    ts: float  # seconds since the epoch
    pci_bus_id: str  # "0000:18:00", as the driver names the GPU
    xid: int
    text: str


def parse_kmsg(lines: list[str], boot_time: float) -> list[XidRecord]:
    """The XIDs among ``/dev/kmsg`` records; ``boot_time`` turns their timestamps into epoch seconds."""
    records = []
    for line in lines:
        prefix, semicolon, message = line.partition(";")
        if not semicolon or line.startswith(" "):
            continue
        fields = prefix.split(",")
        match = _XID.search(message)
        if match is None or len(fields) < 3 or not fields[2].isdigit():
            continue
        text = _PID.sub("", match["text"].strip())
        xid = int(match["xid"])
        if 1 <= xid <= 1000:
            records.append(XidRecord(boot_time + int(fields[2]) / 1e6, match["pci"].lower(), xid, text[:500]))
    return records


def read_kmsg(path: Path = KMSG) -> list[str]:
    """Every record the kernel's ring buffer still holds, oldest first. PermissionError when this
    user may not read it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    try:
        while len(chunks) < MAX_RECORDS:
            try:
                chunk = os.read(fd, 8192)  # /dev/kmsg answers one record a read
            except BlockingIOError:
                break  # read them all
            except OSError as error:
                if error.errno == errno.EPIPE:
                    continue  # records were overwritten while reading: go on from the next
                raise
            if not chunk:
                break  # a plain file (tests) ends
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace").splitlines()


def boot_time() -> float:
    """When the kernel's clock started, in epoch seconds (the kernel log counts from there)."""
    return time.time() - time.monotonic()  # printk stamps with the monotonic clock (no suspend on a server)
