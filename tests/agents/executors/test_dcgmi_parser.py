"""``dcgmi diag -j``: DCGM 4's per-entity results and DCGM 3's per-GPU ones, and what dcgmi prints
when it cannot run."""

import pytest

from agents.executors.tools import dcgmi
from agents.executors.tools.dcgmi import DcgmiOutputError, parse
from tests.agents.executors.conftest import fixture_text


def by_test(run: dcgmi.DiagRun) -> dict[tuple[str, int | None], str]:
    return {(result.test, result.gpu): result.status for result in run.results}


def test_it_reads_dcgm_4_results_per_gpu():
    run = parse(fixture_text("dcgmi_diag_r3_dcgm4_gpu1_memory_faulty.json"))

    assert run.layout == "dcgm4"
    assert (run.version, run.driver) == ("4.2.3", "550.90.07")
    statuses = by_test(run)
    assert statuses[("memory", 0)] == "Pass"
    assert statuses[("memory", 1)] == "Fail"
    assert statuses[("diagnostic", 1)] == "Skip"
    assert sorted((r.test, r.gpu) for r in run.failed) == [("memory", 1), ("targeted_stress", 1)]
    memory = next(r for r in run.results if (r.test, r.gpu) == ("memory", 1))
    assert memory.warnings == ("Found 112 faulty memory elements on GPU 1",)
    assert memory.error_ids == (52,)
    assert memory.category == "Hardware"
    assert memory.info == ("Allocated 81231200256 bytes (96.2%)",)


def test_it_reads_dcgm_3_level_one_results_with_their_quirks():
    run = parse(fixture_text("dcgmi_diag_r1_dcgm3_row_remap_pending.json"))

    assert run.layout == "dcgm3"
    assert (run.version, run.driver) == ("3.3.5", "535.161.08")
    statuses = by_test(run)
    assert statuses[("Denylist", None)] == "Pass"  # "PASS", node-wide
    assert statuses[("Inforom", None)] == "Skip"
    remap = next(r for r in run.results if r.test == "Page Retirement/Row Remap")
    assert (remap.gpu, remap.status, remap.error_ids) == (5, "Fail", (81,))
    assert "row remapping is pending" in remap.warnings[0]  # the message under "warnings", not "warning"


def test_it_reads_dcgm_3_per_gpu_results_and_expands_gpu_ids():
    run = parse(fixture_text("dcgmi_diag_r2_dcgm3_pcie_per_gpu.json"))

    statuses = by_test(run)
    assert [statuses[("Denylist", gpu)] for gpu in range(4)] == ["Pass"] * 4
    assert statuses[("PCIe", 1)] == "Fail"
    pcie = next(r for r in run.results if (r.test, r.gpu) == ("PCIe", 1))
    assert pcie.info[0].startswith("GPU 1 GPU to Host bandwidth")  # a string in DCGM 3, kept as one line
    assert pcie.warnings == ("Detected more than 8 PCIe replays per minute for GPU 1 : 41",)


def test_it_reports_a_diag_that_could_not_run_past_the_text_before_the_document():
    with pytest.raises(DcgmiOutputError, match="unable to connect to the host engine"):
        parse(fixture_text("dcgmi_diag_runtime_error.txt"))


def test_it_reads_each_iteration():
    one = fixture_text("dcgmi_diag_r3_dcgm4_gpu1_memory_faulty.json")
    text = '{"iterations": [' + one + "," + one + '], "Overall Result": "Fail"}'

    run = parse(text)

    assert run.overall == "Fail"
    assert {r.iteration for r in run.results} == {0, 1}
    assert len(run.failed) == 4


@pytest.mark.parametrize("text", ["Error: dcgmi is not running", "{not json}", '{"Something": {}}'])
def test_it_refuses_what_is_not_a_diag_document(text):
    with pytest.raises(DcgmiOutputError):
        parse(text)
