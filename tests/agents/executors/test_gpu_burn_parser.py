"""gpu-burn's output: the per-GPU verdicts it prints last (its exit code is 0 either way), and what
its progress line says when there is no summary."""

from agents.executors.tools.gpu_burn import parse
from tests.agents.executors.conftest import fixture_text


def test_it_finds_the_faulty_gpu_that_gpu_burn_exits_0_for():
    run = parse(fixture_text("gpu_burn_h100x8_gpu5_faulty.txt"))

    assert run.complete
    assert run.faulty == [5]
    assert sorted(run.gpus) == list(range(8))
    assert run.gpus[5].errors == 3  # the progress line's count before the summary reset it
    assert run.percent == 100.0


def test_it_reads_each_gpus_last_gflops_and_temperature():
    run = parse(fixture_text("gpu_burn_h100x8_gpu5_faulty.txt"))

    assert 52000 < run.gpus[0].gflops < 53600
    assert 46900 < run.gpus[3].gflops < 47900  # the slow one
    assert run.gpus[2].temp_c == 73


def test_it_maps_the_summarys_gpu_0_to_the_gpu_given_with_i():
    run = parse(fixture_text("gpu_burn_h200_single_gpu_i3.txt"), gpu_indices=[3])

    assert list(run.gpus) == [3]
    assert run.complete
    assert run.faulty == []
    assert run.gpus[3].gflops == 54110


def test_without_a_summary_a_worker_that_died_is_faulty_and_the_run_incomplete():
    run = parse(fixture_text("gpu_burn_a100_worker_died_killed.txt"))

    assert not run.complete
    assert run.faulty == [1]
    assert run.gpus[1].died
    assert run.gpus[1].temp_c is None  # "--": no reading
    assert run.gpus[0].temp_c == 61


def test_it_notices_that_every_worker_died():
    run = parse("Burning for 60 seconds.\n\n\nNo clients are alive!  Aborting\n")

    assert run.aborted
    assert not run.complete


def test_nvidia_smi_lines_are_not_verdicts():
    run = parse("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nTested 1 GPUs:\n\tGPU 0: FAULTY\n")

    assert run.complete
    assert run.faulty == [0]
