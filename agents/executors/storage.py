"""Storage: write a checkpoint-sized file and read it back, GB/s each way, then it is gone.

The write goes through the page cache, as ``torch.save`` does, and is followed by ``fsync``; its
figure is bytes ÷ (writing + fsync) ÷ 10⁹, so it counts the data reaching the device, not the
cache. The read-back bypasses the page cache where the filesystem lets it: ``O_DIRECT`` (aligned
buffers, block-sized reads); else ``posix_fadvise(POSIX_FADV_DONTNEED)`` after the fsync, which
drops the file's clean pages; the evidence says which one ran (on tmpfs neither can: the file lives
in memory, and the evidence says that too). Every block read is compared with what was written
(each block carries its own number, so a block read from the wrong place is caught), outside the
timed reads.

The file never has a name anyone could find: it is created with ``O_TMPFILE`` where the filesystem
supports it, or created and unlinked at once. Its space returns when the process closes it, which
the kernel does however the process ends: SIGTERM, SIGKILL of its process group, a crash. Nothing
is left behind to clean up.
"""

import errno
import mmap
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agents.executors.context import CheckContext
from agents.executors.params import MIB, StorageParams
from agents.executors.results import measurement
from agents.executors.runtime import CheckUnavailable

FREE_SPACE_MARGIN: Final = 64 * MIB  # left free beyond the file, for whatever else the node writes
STAMP: Final = 8  # bytes at the start of each block: its number
MOUNTS: Final = Path("/proc/self/mounts")


@dataclass(frozen=True)
class Mount:
    point: str
    device: str
    filesystem: str


def run(params: StorageParams, ctx: CheckContext) -> None:
    directory = Path(params.directory or tempfile.gettempdir())
    if not directory.is_dir():
        raise CheckUnavailable(f"{directory} is not a directory")
    blocks = -(-params.size_bytes // params.block_bytes)
    size = blocks * params.block_bytes
    mount = mount_of(directory)
    ctx.result.ran_on("cpu", f"{mount.filesystem} on {mount.device} at {mount.point}", "posix")
    free = _free_bytes(directory)
    if free < size + FREE_SPACE_MARGIN:
        raise CheckUnavailable(
            f"{directory} has {free / 1e9:.2f} GB free; the check needs {size / 1e9:.2f} GB and a margin"
        )
    ctx.result.evidence.update(
        directory=str(directory), size_bytes=size, block_bytes=params.block_bytes, filesystem=mount.filesystem
    )
    pattern = mmap.mmap(-1, params.block_bytes)  # page-aligned, as O_DIRECT needs
    pattern.write(secrets.token_bytes(params.block_bytes))  # incompressible: a compressing filesystem gains nothing
    fd, naming = open_unnamed(directory)
    ctx.result.evidence["file"] = naming
    try:
        write_s, fsync_s = _write(fd, pattern, blocks, ctx)
        ctx.result.evidence.update(write_seconds=round(write_s, 9), fsync_seconds=round(fsync_s, 9))
        ctx.result.add(measurement("write", size / (write_s + fsync_s) / 1e9, "GB/s", params.min_write_gbps))
        bypass = bypass_page_cache(fd, mount)
        ctx.result.evidence["read_cache_bypass"] = bypass
        read_s, wrong = _read(fd, pattern, blocks, ctx)
        ctx.result.evidence["read_seconds"] = round(read_s, 9)
        ctx.result.add(
            measurement("read", size / read_s / 1e9, "GB/s", params.min_read_gbps, evidence={"cache_bypass": bypass}),
            measurement("mismatched_blocks", wrong, "count", 0, "at_most"),
        )
    finally:
        os.close(fd)  # the file had no name: closing it is removing it


def open_unnamed(directory: Path) -> tuple[int, str]:
    """A new, empty file in ``directory`` that no path leads to, and how it was made nameless."""
    try:
        return os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o600), "O_TMPFILE (never named)"
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
            raise
    path = directory / f".cp-burnin-storage-{os.getpid()}-{secrets.token_hex(6)}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.unlink(path)
    return fd, "created and unlinked at once (no O_TMPFILE here)"


def bypass_page_cache(fd: int, mount: Mount) -> str:
    """Make the reads that follow come from the device, and say how."""
    if mount.filesystem in ("tmpfs", "ramfs"):
        return f"none: {mount.filesystem} keeps the file in memory, so the figures are memory's"
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
        return "O_DIRECT"
    except OSError:
        pass
    os.fdatasync(fd)  # only clean pages can be dropped
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return "posix_fadvise(POSIX_FADV_DONTNEED) (no O_DIRECT here)"


def _write(fd: int, pattern: mmap.mmap, blocks: int, ctx: CheckContext) -> tuple[float, float]:
    view = memoryview(pattern)
    spent = 0.0
    for number in range(blocks):
        pattern[:STAMP] = number.to_bytes(STAMP, "little")
        began = time.perf_counter()
        _write_all(fd, view)
        spent += time.perf_counter() - began
        ctx.reporter.progress(0.5 * (number + 1) / blocks, "write")
    began = time.perf_counter()
    os.fsync(fd)
    return spent, time.perf_counter() - began


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def _read(fd: int, pattern: mmap.mmap, blocks: int, ctx: CheckContext) -> tuple[float, int]:
    block = len(pattern)
    buffer = mmap.mmap(-1, block)
    view = memoryview(buffer)
    os.lseek(fd, 0, os.SEEK_SET)
    spent, wrong = 0.0, 0
    for number in range(blocks):
        began = time.perf_counter()
        got = _read_all(fd, view)
        spent += time.perf_counter() - began
        expected_stamp = number.to_bytes(STAMP, "little")
        wrong += got != block or buffer[:STAMP] != expected_stamp or view[STAMP:] != memoryview(pattern)[STAMP:]
        ctx.reporter.progress(0.5 + 0.5 * (number + 1) / blocks, "read")
    return spent, wrong


def _read_all(fd: int, view: memoryview) -> int:
    got = 0
    while got < len(view):
        count = os.readv(fd, [view[got:]])
        if count == 0:
            break
        got += count
    return got


def mount_of(directory: Path, mounts: Path = MOUNTS) -> Mount:
    """The mount ``directory`` lives on: the longest mount point that is a prefix of its real path."""
    path = os.path.realpath(directory)
    best = Mount("/", "unknown", "unknown")
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best.point):
            best = Mount(point, fields[0], fields[2])
    return best


def _free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize
