"""nccl-tests output, read by its header: every release's columns, and the lines that are not rows."""

import pytest

from agents.executors.tools.nccl_tests import NcclTestsOutputError, parse
from tests.agents.executors.conftest import fixture_text


def test_it_reads_the_table_with_a_root_column_past_nccl_log_lines():
    run = parse(fixture_text("all_reduce_perf_2.13_h100x8.txt"))

    assert len(run.rows) == 32  # 8 B to 16 GiB
    assert run.skipped_lines == 1  # the NCCL INFO line among the rows (those before the header are no concern)
    largest = run.rows[-1]
    assert (largest.size_bytes, largest.count, largest.dtype, largest.redop, largest.root) == (
        17179869184, 4294967296, "float", "sum", -1,
    )  # fmt: skip
    assert largest.out_of_place.busbw_gbps == 472.95
    assert largest.in_place.busbw_gbps == 471.17
    assert largest.out_of_place.time_us == 63569
    assert run.check_column == "#wrong"
    assert run.wrong_elements == 0
    assert run.out_of_bounds == 0
    assert run.avg_busbw_gbps == 167.358
    assert len(run.devices) == 8
    assert run.devices[0].endswith("NVIDIA H100 80GB HBM3")


def test_busbw_is_algbw_times_2_n_minus_1_over_n_in_what_it_reads():
    run = parse(fixture_text("all_reduce_perf_2.13_h100x8.txt"))

    for row in run.rows[-8:]:  # sizes where the printed figures have enough digits
        half = row.out_of_place
        assert half.busbw_gbps == pytest.approx(half.algbw_gbps * 2 * 7 / 8, rel=2e-3)
        assert half.algbw_gbps == pytest.approx(row.size_bytes / half.time_us / 1e3, rel=2e-3)


def test_it_reads_the_older_format_without_root_and_with_an_error_column():
    run = parse(fixture_text("all_reduce_perf_2.11_a100_2nodes.txt"))

    assert len(run.rows) == 9
    assert all(row.root is None for row in run.rows)
    assert run.check_column == "error"
    assert run.rows[0].out_of_place.wrong == 5e-07  # the largest deviation, not a count...
    assert run.wrong_elements is None  # ...so no count of wrong elements comes of it
    assert run.rows[-1].out_of_place.busbw_gbps == 187.32
    assert len(run.devices) == 16


def test_it_reads_per_iteration_columns_timestamps_and_n_a():
    run = parse(fixture_text("all_reduce_perf_2.19_iter_timestamps.txt"))

    assert run.version == "2.19.6"
    assert [row.size_bytes for row in run.rows] == [1048576 * 4**k for k in range(5)]
    assert run.rows[-1].dtype == "bfloat16"
    assert run.rows[-1].out_of_place.busbw_gbps == 342.30
    assert run.rows[-1].in_place.busbw_gbps == 338.91  # found past the out-of-place per-iteration columns
    assert run.rows[0].out_of_place.wrong is None  # N/A: checking was off (-c 0)
    assert run.wrong_elements is None
    assert run.avg_busbw_gbps == 230.641


def test_it_counts_wrong_elements_in_both_halves():
    run = parse(fixture_text("all_reduce_perf_wrong_results.txt"))

    assert run.wrong_elements == 2048 + 17
    assert run.out_of_bounds == 2


def test_it_says_why_when_there_is_no_table():
    with pytest.raises(NcclTestsOutputError, match="unhandled cuda error"):
        parse(fixture_text("all_reduce_perf_nccl_failure.txt"))


def test_it_reads_a_trace_replay_row_without_its_out_of_place_half():
    header = fixture_text("all_reduce_perf_2.13_h100x8.txt").split("           8  ")[0]
    replay = "     1048576        262144     float     sum      -1" + " " * 32 + "    40.12   26.14   45.74      0\n"

    (row,) = parse(header + replay).rows

    assert row.out_of_place is None
    assert row.in_place.busbw_gbps == 45.74


def test_it_reads_the_footer_that_very_old_releases_printed_without_a_hash():
    text = (
        fixture_text("all_reduce_perf_2.11_a100_2nodes.txt")
        .replace("# Avg bus", " Avg bus")
        .replace("# Out of", " Out of")
    )

    run = parse(text)

    assert run.avg_busbw_gbps == 180.97
    assert run.out_of_bounds == 0
