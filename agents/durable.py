"""Files the agent must not lose or leave half-written: its credential, its fleet's credentials, the
buffer's state (``write_private_file``), and the directory entries of the spool's segments
(``fsync_dir``)."""

import os
from pathlib import Path


def write_private_file(path: Path, content: bytes) -> None:
    """Replace ``path`` atomically with a file only its owner can read (0600), durably."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as private:
        os.fchmod(descriptor, 0o600)  # O_CREAT's mode is masked by the umask
        private.write(content)
        private.flush()
        os.fsync(descriptor)
    os.replace(temporary, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make the creation, replacement or removal of a file in ``path`` durable."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
