from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from agents.protocol import GpuSample
from apps.dashboard import streams
from apps.dashboard.messages import heat_cell, heat_cells
from apps.dashboard.streams import alarm_summary
from apps.inventory.models import Node
from apps.telemetry.models import LatestGpuSample
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


def test_postgresql_sums_up_the_fleet_as_the_python_path_does(db):
    """The fleet snapshot's telemetry, summed up by PostgreSQL, is the same as summed up in Python
    from the same rows: halves round to even both ways, absent values stay absent, gaps stay gaps."""
    if connection.vendor != "postgresql":
        pytest.skip("the snapshot sums up in the database on PostgreSQL only")
    cluster, node_type = factories.cluster(), factories.node_type(nics=0)
    at = datetime(2026, 11, 30, 12, 0, 0, 123_000, tzinfo=UTC)
    rows = {
        "halves": [(i, 50.5 + i, 349.5 + 2 * i, 60.5, 1536 + 1024 * i) for i in range(8)],
        "gaps and absences": [(0, None, 300.0, None, None), (3, 12.25, None, 41.0, 81_920), (7, None, None, None, 0)],
        "nothing reported": [(i, None, None, None, None) for i in range(4)],
    }
    for hostname, gpus in rows.items():
        node = factories.node(cluster, node_type, hostname.replace(" ", "-"))
        LatestGpuSample.objects.bulk_create(
            LatestGpuSample(
                node=node,
                gpu_index=index,
                ts=at - timedelta(seconds=index),
                received_at=at,
                util_gpu=util,
                power_w=power,
                temp_c=temp,
                mem_used_mib=mem,
            )
            for index, util, power, temp, mem in gpus
        )

    in_python = streams._python_fleet_telemetry()

    assert streams._postgresql_fleet_telemetry() == in_python
    assert len(in_python) == 3
    halves = in_python[Node.objects.get(hostname="halves").pk]
    assert [cell[0] for cell in halves["heat"]] == [50, 52, 52, 54, 54, 56, 56, 58]  # 50.5 -> 50, 51.5 -> 52
    assert halves["ts"] == round(at.timestamp(), 3)


def fell_off_the_bus(at: datetime) -> Node:
    """A node whose GPU 6 stopped reporting a minute before the others' newest sample (XID 79)."""
    node = factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-079")
    LatestGpuSample.objects.bulk_create(
        LatestGpuSample(
            node=node,
            gpu_index=index,
            ts=at - timedelta(minutes=1) if index == 6 else at,
            received_at=at,
            util_gpu=98.0 if index == 6 else 40.0,
            power_w=625.0 if index == 6 else 300.0,
            temp_c=63.0,
            mem_used_mib=2048,
        )
        for index in range(8)
    )
    return node


@pytest.mark.parametrize("summed_up", ["_python_fleet_telemetry", "_postgresql_fleet_telemetry"])
def test_a_gpu_that_stopped_reporting_lends_the_fleet_entry_none_of_its_last_values(db, summed_up):
    if summed_up == "_postgresql_fleet_telemetry" and connection.vendor != "postgresql":
        pytest.skip("the snapshot sums up in the database on PostgreSQL only")
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    node = fell_off_the_bus(at)

    entry = getattr(streams, summed_up)()[node.pk]

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
