"""The log lines a check ends with: its outcome in one line, then each figure that failed, the same on a
real node and a simulated one."""

import asyncio

import pytest

from agents.executors.results import ResultBuilder, measurement
from agents.executors.summary import FAILED_FIGURES_LOGGED, summary_lines
from agents.protocol import CheckLog, Command, decode_check_line
from agents.simulator.collector import SimulatedCollector
from agents.simulator.commands import SimulatedRunner
from tests.agents.executors.test_check_process import check_process

T0 = 1_780_000_000.0


def built(*figures, **finish):
    builder = ResultBuilder("compute", clock=lambda: T0)
    builder.ran_on("gpu", "NVIDIA H100 80GB HBM3", "torch 2.13.0")
    builder.add(*figures)
    return builder.finish(**finish)


def said(result) -> list[tuple[str, str]]:
    return [(line.level, line.message) for line in summary_lines(result)]


def test_a_pass_is_one_line_naming_where_it_ran():
    result = built(measurement("tflops_bf16", 750, "TFLOP/s", 720, gpu=0))

    assert said(result) == [("info", "passed on NVIDIA H100 80GB HBM3 (torch 2.13.0): 1 figure, all within bounds")]


def test_a_failure_names_each_failed_figure_with_its_bound():
    result = built(
        measurement("tflops_bf16", 750, "TFLOP/s", 720, gpu=0),
        measurement("tflops_bf16", 688.5, "TFLOP/s", 720, gpu=3),
        measurement("p2p_gbps", 120, "GB/s", 335, gpu=0, peer=5),
        measurement("symbol_errors", 4, "count", 0, "at_most", port="mlx5_0/1"),
    )

    assert said(result) == [
        ("warning", "failed on NVIDIA H100 80GB HBM3 (torch 2.13.0): 3 of 4 figures out of bounds"),
        ("warning", "tflops_bf16 GPU 3: 688.5 TFLOP/s, expected ≥ 720"),
        ("warning", "p2p_gbps GPU 0↔5: 120 GB/s, expected ≥ 335"),
        ("warning", "symbol_errors mlx5_0/1: 4 count, expected ≤ 0"),
    ]


def test_many_failed_figures_are_capped_and_counted():
    result = built(*(measurement("tflops_bf16", 1, "TFLOP/s", 720, gpu=gpu % 8) for gpu in range(15)))

    lines = said(result)
    assert len(lines) == 1 + FAILED_FIGURES_LOGGED + 1
    assert lines[-1] == ("warning", f"and {15 - FAILED_FIGURES_LOGGED} more failed figures")


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        (
            {"error": "CUDA out of memory"},
            ("error", "could not finish on NVIDIA H100 80GB HBM3 (torch 2.13.0): CUDA out of memory"),
        ),
        (
            {"skipped": "one GPU: no pairs"},
            ("info", "skipped on NVIDIA H100 80GB HBM3 (torch 2.13.0): one GPU: no pairs"),
        ),
    ],
)
def test_an_error_or_a_skip_says_why(finish, expected):
    assert said(built(**finish)) == [expected]


def test_figures_without_bounds_are_left_to_the_control_plane():
    result = built(measurement("tflops_bf16", 750, "TFLOP/s", gpu=0))

    level, message = said(result)[0]
    assert level == "info"
    assert message.endswith("1 figure, judged by the control plane against its thresholds")


def test_a_pass_of_the_nodes_own_bounds_leaves_the_rest_to_the_control_plane():
    # A straggler's compute: its drop is within the node's bound, its TFLOP/s has no bound on the node
    # and the control plane fails it; the log must not say "all within bounds".
    result = built(
        measurement("tflops_drop_bf16", 0.01, "ratio", 0.05, "at_most", gpu=3),
        measurement("tflops_bf16", 688.5, "TFLOP/s", gpu=3),
    )

    assert said(result) == [
        (
            "info",
            "finished on NVIDIA H100 80GB HBM3 (torch 2.13.0): 2 figures, 1 within the node's own bounds, "
            "1 judged by the control plane against its thresholds",
        )
    ]


def test_the_check_process_ends_its_log_with_the_summary():
    ran = check_process("storage", "--params", '{"size_bytes": 1048576}')

    logs = [line for line in map(decode_check_line, ran.stdout.splitlines()) if isinstance(line, CheckLog)]
    assert logs, ran.stderr.decode()
    assert logs[-1].check == "storage"
    assert logs[-1].message.startswith(("passed on", "finished on")), logs[-1].message


def test_a_simulated_check_logs_its_failed_figures():
    collector = SimulatedCollector("h100", "sim-0007", seed=11, faults="sim-0007:straggler:gpu3", start=T0)
    for t in range(60):
        collector.sample(T0 + t)
    params = {"duration_s": 20, "dtypes": ["bf16"], "min_tflops": {"bf16": 720}}
    command = Command(key="k-1", check="compute", time_limit_s=600, deadline=T0 + 3600, params=params)
    relayed: list = []

    result = asyncio.run(
        SimulatedRunner(collector, time_scale=0).run(
            command, stop=asyncio.Event(), started=lambda pid: None, relay=relayed.append
        )
    )

    logs = [line for line in relayed if isinstance(line, CheckLog)]
    assert logs[0].message.startswith("failed on simulated")
    assert any(line.message.startswith("tflops_bf16 GPU 3: ") for line in logs[1:])
    assert result.result.passed is False
