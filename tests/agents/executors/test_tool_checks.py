"""The checks that run a standard tool, against stand-ins that print what the real tools print
(their captured-style output; the tools drive GPUs this machine does not have)."""

import stat
from pathlib import Path

import pytest

from agents.simulator.collector import SimulatedCollector
from tests.agents.executors.conftest import FIXTURES


def stand_in(tmp_path: Path, name: str, fixture: str, exit_code: int = 0) -> Path:
    """An executable that records its arguments and working directory and prints ``fixture``."""
    tool = tmp_path / "bin" / name
    tool.parent.mkdir(exist_ok=True)
    record = tmp_path / f"{name}.args"
    tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "$PWD" "$@" > {record}\ncat {FIXTURES / fixture}\nexit {exit_code}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return tool


def recorded(tmp_path: Path, name: str) -> list[str]:
    return (tmp_path / f"{name}.args").read_text().splitlines()


@pytest.fixture
def gpus():
    collector = SimulatedCollector("h100", "gpu-042", seed=1)
    return lambda: collector


def test_gpu_burn_exiting_0_with_a_faulty_gpu_fails_that_gpu(run_check, tmp_path, gpus):
    tool = stand_in(tmp_path, "gpu-burn", "gpu_burn_h100x8_gpu5_faulty.txt")

    ran = run_check("gpu_burn", {"duration_s": 60}, which={"gpu-burn": str(tool)}.get, open_collector=gpus)

    result = ran.result
    assert (result.tool, result.device, result.passed, ran.code) == ("gpu-burn", "cuda", False, 1)
    faulty = {m.gpu: m.passed for m in ran.named("faulty")}
    assert faulty == {i: i != 5 for i in range(8)}
    (slow,) = ran.named("tflops", gpu=3)
    assert 46.9 < slow.measured < 47.9
    assert slow.unit == "TFLOP/s"
    assert recorded(tmp_path, "gpu-burn") == [str(tool.parent), "-tc", "-m", "90%", "60"]  # run beside compare.ptx
    assert result.evidence["complete"] is True
    assert result.evidence["exit_code"] == 0


def test_gpu_burn_on_one_gpu_names_it_by_the_nodes_index(run_check, tmp_path, gpus):
    tool = stand_in(tmp_path, "gpu-burn", "gpu_burn_h200_single_gpu_i3.txt")

    params = {"duration_s": 10, "gpus": [3], "tensor_cores": False}
    ran = run_check("gpu_burn", params, which={"gpu-burn": str(tool)}.get, open_collector=gpus)

    assert [(m.gpu, m.passed) for m in ran.named("faulty")] == [(3, True)]
    assert recorded(tmp_path, "gpu-burn")[1:] == ["-m", "90%", "-i", "3", "10"]


def test_gpu_burn_without_its_summary_is_an_error_that_keeps_its_figures(run_check, tmp_path, gpus):
    tool = stand_in(tmp_path, "gpu-burn", "gpu_burn_a100_worker_died_killed.txt", exit_code=137)

    ran = run_check("gpu_burn", {"duration_s": 60}, which={"gpu-burn": str(tool)}.get, open_collector=gpus)

    assert ran.result.error.startswith("gpu-burn exited 137 without its per-GPU summary")
    assert ran.result.passed is False  # the worker that died
    assert [(m.gpu, m.passed) for m in ran.named("faulty")] == [(0, True), (1, False)]


def test_without_gpu_burn_the_built_in_stress_runs(run_check):
    ran = run_check("gpu_burn", {"duration_s": 1, "tensor_cores": True}, which=lambda name: None)

    assert ran.result.tool.startswith("torch")
    assert ran.result.evidence["instead_of_gpu_burn"].startswith("gpu-burn is not on PATH")
    assert ran.named("tflops_fp32")  # TF32 is a tensor-core mode; the CPU stresses in fp32


def test_dcgmi_diag_fails_the_gpu_and_test_that_failed(run_check, tmp_path, gpus):
    tool = stand_in(tmp_path, "dcgmi", "dcgmi_diag_r3_dcgm4_gpu1_memory_faulty.json", exit_code=226)

    ran = run_check("dcgm_diag", {"level": 3, "gpus": [0, 1]}, which={"dcgmi": str(tool)}.get, open_collector=gpus)

    result = ran.result
    assert (result.tool, result.passed) == ("dcgmi 4.2.3", False)
    assert sorted((m.name, m.gpu) for m in result.measurements if m.passed is False) == [
        ("dcgm_memory", 1), ("dcgm_targeted_stress", 1),
    ]  # fmt: skip
    (memory,) = ran.named("dcgm_memory", gpu=1)
    assert memory.evidence["warnings"] == ["Found 112 faulty memory elements on GPU 1"]
    assert memory.evidence["error_ids"] == [52]
    (skipped,) = ran.named("dcgm_diagnostic", gpu=1)
    assert (skipped.passed, skipped.evidence["status"]) == (None, "Skip")
    assert recorded(tmp_path, "dcgmi")[1:] == ["diag", "-r", "3", "-j", "-i", "0,1"]
    assert result.evidence["exit_code"] == 226  # non-zero, and not what the verdict is read from


def test_dcgmi_that_cannot_reach_its_host_engine_is_an_error(run_check, tmp_path, gpus):
    tool = stand_in(tmp_path, "dcgmi", "dcgmi_diag_runtime_error.txt", exit_code=255)

    ran = run_check("dcgm_diag", None, which={"dcgmi": str(tool)}.get, open_collector=gpus)

    assert "unable to connect to the host engine" in ran.result.error


def test_without_dcgmi_the_diag_is_skipped(run_check):
    ran = run_check("dcgm_diag", {"level": 2}, which=lambda name: None)

    assert ran.result.skipped == "dcgmi is not on PATH (DCGM is not installed on this node)"
    assert ran.code == 0


def test_nccl_tests_needs_a_gpu(run_check, tmp_path):
    tool = stand_in(tmp_path, "all_reduce_perf", "all_reduce_perf_2.13_h100x8.txt")

    ran = run_check("nccl_allreduce", {"implementation": "nccl-tests"}, which={"all_reduce_perf": str(tool)}.get)

    assert "needs all_reduce_perf on PATH, a GPU and a single node" in ran.result.error
