"""The compute check, really run on this machine's CPU: short, labelled, its figures from its own
timings by 2·M·N·K. Nothing here asserts a speed."""

import pytest

from agents.executors.params import ComputeParams
from agents.protocol import CheckProgress

FAST = {"duration_s": 0.1, "window_s": 0.03, "size": 128, "max_drop": 1.0}


def test_it_runs_fp32_and_bf16_on_the_cpu_and_says_so(run_check):
    ran = run_check("compute", FAST)

    result = ran.result
    assert (result.device, result.check, ran.code) == ("cpu", "compute", 0)
    assert "CPU" in result.device_name
    assert result.tool.startswith("torch 2.")
    assert {m.name for m in result.measurements} == {
        "tflops_fp32", "tflops_drop_fp32", "mismatches_fp32", "tflops_bf16", "tflops_drop_bf16", "mismatches_bf16",
    }  # fmt: skip
    assert all(m.gpu is None for m in result.measurements)
    assert not any(m.name.startswith("max_temp") for m in result.measurements)  # no collector on a CPU


def test_tflops_are_the_matmuls_flops_over_their_time(run_check):
    ran = run_check("compute", {**FAST, "dtypes": ["fp32"]})

    (tflops,) = ran.named("tflops_fp32")
    evidence = tflops.evidence
    matmuls = evidence["windows"] * evidence["matmuls_per_window"]
    assert tflops.unit == "TFLOP/s"
    assert tflops.measured > 0
    assert tflops.measured == pytest.approx(matmuls * 2 * 128**3 / evidence["seconds"] / 1e12, rel=1e-3)
    assert evidence["windows"] >= 2
    assert evidence["min"] <= tflops.measured <= evidence["max"] * 1.001
    (mismatches,) = ran.named("mismatches_fp32")
    assert (mismatches.measured, mismatches.passed) == (0, True)  # the same inputs gave the same product


def test_min_tflops_judges_each_dtype(run_check):
    ran = run_check("compute", {**FAST, "dtypes": ["fp32", "bf16"], "min_tflops": {"fp32": 1e6}})

    (fp32,) = ran.named("tflops_fp32")
    (bf16,) = ran.named("tflops_bf16")
    assert (fp32.expected, fp32.passed) == (1e6, False)
    assert (bf16.expected, bf16.passed) == (None, None)
    assert ran.result.passed is False
    assert ran.code == 1


def test_tf32_does_not_exist_on_the_cpu(run_check):
    ran = run_check("compute", {**FAST, "dtypes": ["tf32", "fp32"]})

    assert ran.result.evidence["dtypes_not_run"] == {"tf32": "not supported on the CPU"}
    assert not ran.named("tflops_tf32")


def test_it_reports_progress_per_dtype(run_check):
    ran = run_check("compute", FAST)

    steps = [line.step for line in ran.lines if isinstance(line, CheckProgress)]
    assert any(step.startswith("fp32 on ") for step in steps)
    assert any(step.startswith("bf16 on ") for step in steps)


def test_a_drop_over_the_run_fails_even_with_a_good_mean():
    from agents.executors.compute import Lane, judge

    lanes = [Lane(0, None, None, None, None, per_window=10, windows=[1.0, 1.0, 1.0, 1.0, 1.6, 1.6, 1.6, 1.6])]

    measured = {m.name: m for m in judge(lanes, "bf16", 1024, ComputeParams(max_drop=0.1))}

    assert measured["tflops_drop_bf16"].measured == pytest.approx(1 - 1 / 1.6)
    assert measured["tflops_drop_bf16"].passed is False
    assert measured["tflops_bf16"].passed is None  # no threshold given: the mean is not judged
