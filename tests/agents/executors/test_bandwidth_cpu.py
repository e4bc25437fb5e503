"""Memory, PCIe and NVLink bandwidth, really run on this machine's CPU (host memory copies, which
is what these figures are without a GPU, and the results say so). No speed is asserted."""

import pytest

from agents.executors.nvlink import matrix, measure_pairs
from agents.executors.params import MIB
from agents.executors.runtime import require_torch

SMALL = {"size_bytes": MIB, "repeats": 3}


def test_memory_bandwidth_counts_each_copy_twice(run_check):
    ran = run_check("memory_bandwidth", {**SMALL, "min_gbps": 0.001})

    (copy,) = ran.result.measurements
    assert (ran.result.device, copy.name, copy.unit, copy.gpu) == ("cpu", "copy", "GB/s", None)
    assert copy.measured == pytest.approx(2 * MIB * 3 / copy.evidence["seconds"] / 1e9, rel=1e-3)
    assert copy.passed is True
    assert ran.result.passed is True
    assert "read + write" in ran.result.evidence["convention"]
    assert ran.result.evidence["memory"] == "host DRAM (no GPU)"


def test_pcie_measures_both_directions_and_says_there_is_no_pcie_on_the_cpu(run_check):
    ran = run_check("pcie", {**SMALL, "min_h2d_gbps": 1e6})

    h2d, d2h = ran.result.measurements
    assert (h2d.name, d2h.name) == ("h2d", "d2h")
    for each in (h2d, d2h):
        assert each.unit == "GB/s"
        assert each.measured == pytest.approx(MIB * 3 / each.evidence["seconds"] / 1e9, rel=1e-3)
    assert (h2d.passed, d2h.passed) == (False, None)
    assert ran.result.passed is False
    assert "not PCIe" in ran.result.evidence["host_memory"]


def test_nvlink_is_skipped_without_two_gpus(run_check):
    ran = run_check("nvlink")

    assert ran.result.skipped.startswith("peer-to-peer bandwidth needs two GPUs or more")
    assert ran.result.passed is None
    assert ran.result.error is None
    assert ran.code == 0


def test_the_pair_matrix_has_every_ordered_pair_once():
    torch = require_torch()
    cpu = torch.device("cpu")
    pairs = [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)]
    access = dict.fromkeys(pairs, False)

    found = measure_pairs(torch, {0: cpu, 1: cpu, 2: cpu}, pairs, MIB, 2, 0.001, access)

    assert [(m.gpu, m.peer) for m in found] == pairs
    assert all(m.passed and m.evidence["peer_access"] is False for m in found)
    assert all(m.measured == pytest.approx(MIB * 2 / m.evidence["seconds"] / 1e9, rel=1e-3) for m in found)
    grid = matrix(found, (0, 1, 2))
    assert [grid[i][i] for i in range(3)] == [None, None, None]
    assert grid[2][1] == round(found[-1].measured, 2)


def test_asking_for_a_gpu_on_a_node_without_one_is_an_error(run_check):
    ran = run_check("memory_bandwidth", {**SMALL, "device": "cuda"})

    assert ran.result.error == "the command asks for CUDA, and torch sees no CUDA device on this node"
    assert ran.code == 3
