"""The storage check on this machine's disk: a real file written, fsynced, read back past the page
cache and gone, also when the check is killed half-way."""

import errno
import json
import os
import signal
import subprocess
import sys

import pytest

from agents.executors import storage
from agents.executors.params import MIB
from agents.protocol import CheckResult, decode_check_line
from tests.agents.executors.conftest import REPO_ROOT


def test_it_writes_and_reads_back_and_leaves_nothing(run_check, tmp_path):
    ran = run_check("storage", {"directory": str(tmp_path), "size_bytes": 8 * MIB, "block_bytes": MIB})

    result = ran.result
    write, read, wrong = result.measurements
    evidence = result.evidence
    assert (write.name, read.name, wrong.name) == ("write", "read", "mismatched_blocks")
    assert write.unit == read.unit == "GB/s"
    assert write.measured == pytest.approx(
        8 * MIB / (evidence["write_seconds"] + evidence["fsync_seconds"]) / 1e9, rel=1e-3
    )
    assert read.measured == pytest.approx(8 * MIB / evidence["read_seconds"] / 1e9, rel=1e-3)
    assert (wrong.measured, wrong.passed) == (0, True)
    assert evidence["read_cache_bypass"].split()[0] in ("O_DIRECT", "posix_fadvise(POSIX_FADV_DONTNEED)", "none:")
    assert evidence["file"].startswith(("O_TMPFILE", "created and unlinked"))
    assert result.device == "cpu"
    assert evidence["filesystem"] in result.device_name
    assert list(tmp_path.iterdir()) == []


def test_it_rounds_the_size_up_to_whole_blocks(run_check, tmp_path):
    ran = run_check("storage", {"directory": str(tmp_path), "size_bytes": 3 * MIB + 1, "block_bytes": MIB})

    assert ran.result.evidence["size_bytes"] == 4 * MIB


def test_it_refuses_a_file_larger_than_the_free_space(run_check, tmp_path):
    ran = run_check("storage", {"directory": str(tmp_path), "size_bytes": 1 << 40})

    assert "GB free; the check needs 1099.51 GB" in ran.result.error
    assert ran.code == 3
    assert list(tmp_path.iterdir()) == []


def test_without_o_tmpfile_the_file_is_unlinked_as_soon_as_it_exists(tmp_path, monkeypatch):
    real_open = os.open

    def no_tmpfile(path, flags, *args):
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_tmpfile)

    fd, how = storage.open_unnamed(tmp_path)
    try:
        os.write(fd, b"checkpoint")
        assert how == "created and unlinked at once (no O_TMPFILE here)"
        assert list(tmp_path.iterdir()) == []
    finally:
        os.close(fd)


def test_the_mount_is_the_longest_mount_point_above_the_directory(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda1 / ext4 rw 0 0\n"
        "tmpfs /run tmpfs rw 0 0\n"
        "lustre@o2ib:/scratch /mnt/scratch lustre rw 0 0\n"
        "/dev/nvme0n1 /mnt/scratch\\040local xfs rw 0 0\n"
    )

    assert storage.mount_of(tmp_path, mounts).point == "/"
    found = storage.mount_of("/mnt/scratch local/ckpt", mounts)  # type: ignore[arg-type]
    assert (found.point, found.filesystem) == ("/mnt/scratch local", "xfs")
    assert storage.mount_of("/mnt/scratchy", mounts).filesystem == "ext4"  # type: ignore[arg-type]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_check_killed_with_its_process_group_leaves_no_process_and_no_file(tmp_path, sig):
    params = {"directory": str(tmp_path), "size_bytes": 4096 * MIB, "block_bytes": MIB}
    check = subprocess.Popen(
        [sys.executable, "-m", "agents.executors", "storage", "--params", json.dumps(params)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, as the command runner starts it
    )
    try:
        first = decode_check_line(check.stdout.readline())  # it is writing
        assert first.step == "write"
        assert first.fraction < 0.5
        assert list(tmp_path.iterdir()) == []  # the file it writes has no name, even now

        os.killpg(check.pid, sig)
        rest, _ = check.communicate(timeout=60)
    finally:
        if check.poll() is None:
            os.killpg(check.pid, signal.SIGKILL)
            check.wait()

    with pytest.raises(ProcessLookupError):
        os.killpg(check.pid, 0)  # nothing of the group is left
    assert list(tmp_path.iterdir()) == []
    lines = [decode_check_line(line) for line in rest.splitlines()]
    if sig == signal.SIGTERM:
        result = lines[-1]
        assert isinstance(result, CheckResult)
        assert result.error.startswith("interrupted by SIGTERM after ")
        assert check.returncode == 3
    else:
        assert not any(isinstance(line, CheckResult) for line in lines)
        assert check.returncode == -signal.SIGKILL
