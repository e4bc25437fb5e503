from agents.protocol import GpuSample
from apps.dashboard.streams import alarm_summary
from apps.telemetry.live import heat_cell, heat_cells


def test_alarm_summary_names_the_gpus_with_alarms_and_those_flagged_as_stragglers():
    summary = alarm_summary([("warning", 3, "straggler"), ("critical", 5, "xid"), ("error", None, "infiniband")])

    assert summary == {"alarms": 3, "severity": "critical", "alarm_gpus": [3, 5], "straggler_gpus": [3]}


def test_a_node_without_alarms_has_empty_lists_so_a_delta_clears_the_outline():
    assert alarm_summary([]) == {"alarms": 0, "severity": None, "alarm_gpus": [], "straggler_gpus": []}


def test_a_heat_cell_holds_whole_numbers_and_memory_in_gib_and_keeps_absent_values_absent():
    gpu = GpuSample(index=0, util_gpu=54.6, power_w=699.5, temp_c=None, mem_used_mib=81_920)

    assert heat_cell(gpu) == [55, 700, None, 80]


def test_a_nodes_cells_are_listed_by_gpu_index_with_a_gap_where_a_gpu_did_not_report():
    def reading(index: int) -> GpuSample:
        return GpuSample(index=index, util_gpu=10.0, power_w=100.0, temp_c=40.0, mem_used_mib=2048)

    assert heat_cells([reading(2), reading(0)]) == [[10, 100, 40, 2], None, [10, 100, 40, 2]]
