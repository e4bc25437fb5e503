"""The all-reduce check, really launched with torchrun on this machine: gloo, local ranks, figures
by nccl-tests' formulas; and a cancelled one leaves no rank behind."""

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agents.executors.allreduce import bus_bandwidth, sweep_rows
from agents.protocol import CheckProgress
from tests.agents.executors.conftest import REPO_ROOT

SIZES = [4096, 65536, 262144]


def test_it_measures_bus_bandwidth_over_three_gloo_ranks_and_labels_it_cpu(run_check):
    params = {"sizes_bytes": SIZES, "iters": 3, "warmup": 1, "nproc_per_node": 3, "theoretical_busbw_gbps": 1e6}
    ran = run_check("nccl_allreduce", params)

    result = ran.result
    assert (result.device, result.error) == ("cpu", None)
    assert result.tool.endswith("gloo via torchrun")
    assert (result.evidence["backend"], result.evidence["ranks"]) == ("gloo", 3)
    (busbw,) = ran.named("busbw")
    (algbw,) = ran.named("algbw")
    (wrong,) = ran.named("wrong_elements")
    assert busbw.unit == algbw.unit == "GB/s"
    assert busbw.evidence["algorithm"] == "gloo's own"
    assert busbw.evidence["size_bytes"] == 262144
    assert busbw.measured == pytest.approx(algbw.measured * 2 * (3 - 1) / 3)
    for size, time_us, algbw_gbps, busbw_gbps in busbw.evidence["sweep"]:
        assert algbw_gbps == pytest.approx(size / time_us / 1e3, rel=1e-5)
        assert busbw_gbps == pytest.approx(algbw_gbps * 4 / 3, rel=1e-5)
    assert (busbw.expected, busbw.passed) == (0.8 * 1e6, False)  # under 80 % of the theoretical figure
    assert (wrong.measured, wrong.passed) == (0, True)
    assert result.passed is False
    assert any(isinstance(line, CheckProgress) for line in ran.lines)


def test_bus_bandwidth_is_nccl_tests_formula():
    assert bus_bandwidth(100.0, 8) == 175.0
    assert bus_bandwidth(100.0, 2) == 100.0
    assert bus_bandwidth(100.0, 1) == 0.0  # one rank moves nothing over a link
    (row,) = sweep_rows([(1 << 30, 4000.0, 0)], 16)
    assert row.algbw_gbps == pytest.approx(268.435456)
    assert row.busbw_gbps == pytest.approx(268.435456 * 30 / 16)


def test_a_multi_node_run_needs_a_rendezvous(run_check):
    ran = run_check("nccl_allreduce", {"nnodes": 2, "node_rank": 1})

    assert "needs rendezvous" in ran.result.error
    assert ran.code == 2


def test_a_killed_check_leaves_no_rank_behind(tmp_path):
    marker = random.randrange(1000, 10_000)  # a warm-up count no other run uses, to find our ranks by
    params = {"sizes_bytes": [4096] * 8, "iters": 10_000, "warmup": marker, "nproc_per_node": 2}
    check = subprocess.Popen(
        [sys.executable, "-m", "agents.executors", "nccl_allreduce", "--params", json.dumps(params)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert ranks_running(marker, expect=2), "the ranks never started"
        os.killpg(check.pid, signal.SIGKILL)  # the runner's last resort: torchrun dies at once
        check.wait(timeout=30)
        assert ranks_running(marker, expect=0), "a rank outlived its torchrun"
    finally:
        if check.poll() is None:
            os.killpg(check.pid, signal.SIGKILL)
        check.wait()
        for pid in rank_pids(marker):
            os.kill(pid, signal.SIGKILL)


def ranks_running(marker: int, expect: int, timeout_s: float = 60.0) -> bool:
    """Waits until ``expect`` ranks carrying ``marker`` run (as processes, not by their speed)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(rank_pids(marker)) == expect:
            return True
        time.sleep(0.1)
    return False


def rank_pids(marker: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        rank = b"agents.executors.allreduce_worker" in command and b"torch.distributed.run" not in command
        if rank and state != "Z" and f'"warmup":{marker}'.encode() in b"".join(command):
            found.append(int(entry.name))
    return found
