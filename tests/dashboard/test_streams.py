from datetime import UTC, datetime, timedelta

from agents.protocol import GpuSample
from apps.dashboard import streams
from apps.dashboard.messages import heat_cell, heat_cells
from apps.dashboard.streams import alarm_summary
from apps.inventory.models import Node
from apps.telemetry.models import NodeGpuSample
from tests import factories


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


def test_the_snapshot_sums_up_each_nodes_newest_sample_as_a_live_entry_does(db):
    """Halves round to even, absent values stay absent, gaps stay gaps, as apps/dashboard/messages.py
    sums up a published sample."""
    cluster, node_type = factories.cluster(), factories.node_type(nics=0)
    at = datetime(2026, 11, 30, 12, 0, 0, 123_000, tzinfo=UTC)
    rows = {
        "halves": [(i, 50.5 + i, 349.5 + 2 * i, 60.5, 1536 + 1024 * i) for i in range(8)],
        "gaps and absences": [(0, None, 300.0, None, None), (3, 12.25, None, 41.0, 81_920), (7, None, None, None, 0)],
        "nothing reported": [(i, None, None, None, None) for i in range(4)],
    }
    for hostname, gpus in rows.items():
        node = factories.node(cluster, node_type, hostname.replace(" ", "-"))
        readings = [
            dict(zip(("gpu_index", "util_gpu", "power_w", "temp_c", "mem_used_mib"), g, strict=True)) for g in gpus
        ]
        factories.latest_gpus(node, at, readings)

    entries = streams._stored_fleet_telemetry()

    assert len(entries) == 3
    halves = entries[Node.objects.get(hostname="halves").pk]
    assert [cell[0] for cell in halves["heat"]] == [50, 52, 52, 54, 54, 56, 56, 58]  # 50.5 -> 50, 51.5 -> 52
    assert halves["ts"] == round(at.timestamp(), 3)
    gaps = entries[Node.objects.get(hostname="gaps-and-absences").pk]
    assert gaps["heat"] == [
        [None, 300, None, None],
        None,
        None,
        [12, None, 41, 80],
        None,
        None,
        None,
        [None, None, None, 0],
    ]
    assert (gaps["gpus"], gaps["util_gpu_mean"], gaps["power_w_total"], gaps["temp_c_max"]) == (3, 12.2, 300.0, 41.0)
    nothing = entries[Node.objects.get(hostname="nothing-reported").pk]
    assert (nothing["gpus"], nothing["util_gpu_mean"], nothing["power_w_total"]) == (4, None, None)


def fell_off_the_bus(at: datetime) -> Node:
    """A node whose GPU 6 stopped reporting a minute before its newest sample (XID 79): in the raw
    sample of a minute before, every GPU; in the newest, all but GPU 6."""
    node = factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-079")
    before = [
        GpuSample(index=i, util_gpu=98.0 if i == 6 else 41.0, power_w=625.0 if i == 6 else 301.0, temp_c=63.0)
        for i in range(8)
    ]
    NodeGpuSample.objects.bulk_create([NodeGpuSample.of(node.pk, at - timedelta(minutes=1), before, at)])
    gpus = [dict(gpu_index=i, util_gpu=40.0, power_w=300.0, temp_c=63.0, mem_used_mib=2048) for i in range(8) if i != 6]
    factories.latest_gpus(node, at, gpus)
    return node


def test_a_gpu_that_stopped_reporting_lends_the_fleet_entry_none_of_its_last_values(db):
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    node = fell_off_the_bus(at)

    entry = streams._stored_fleet_telemetry()[node.pk]

    assert entry["heat"][6] is None  # drawn as "no data", as every live entry since has it
    assert entry["heat"][5] == [40, 300, 63, 2]
    assert (entry["gpus"], entry["util_gpu_mean"], entry["power_w_total"]) == (7, 40.0, 2100.0)
    assert entry["ts"] == at.timestamp()


def test_a_node_snapshot_gives_each_gpu_the_time_of_its_own_newest_values(db):
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    node = fell_off_the_bus(at)

    state = streams.node_snapshot(node.pk)

    assert state["ts"] == at.timestamp()
    assert state["gpus"]["6"]["ts"] == (at - timedelta(minutes=1)).timestamp()  # shown as stale, with its age
    assert state["gpus"]["6"]["util_gpu"] == 98.0
    assert state["gpus"]["5"]["ts"] == at.timestamp()


def test_a_live_node_update_dates_every_gpu_it_carries():
    update = {"ts": 1_700_000_000.1234, "gpus": [{"index": 0, **dict.fromkeys(streams.LIVE_GPU_FIELDS, 1.0)}]}

    assert streams.node_fragment(update)["gpus"]["0"]["ts"] == 1_700_000_000.123
