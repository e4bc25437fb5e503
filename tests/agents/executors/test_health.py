"""The health check: the node's counters judged now and against its baseline, through the real
executor over the simulated NVML backend (the one piece of hardware these tests fake)."""

import msgspec
import pytest

from agents.executors.health import Xid, judge
from agents.executors.params import HealthParams
from agents.protocol import GpuSample, NodeSample, PortSample
from agents.simulator.collector import SimulatedCollector

T0 = 1_780_000_000.0


def node(faults: str = "") -> SimulatedCollector:
    collector = SimulatedCollector("h100", "gpu-001", seed=3, faults=faults, start=T0)
    collector.sample(T0)
    return collector


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def failed(result) -> list[tuple]:
    return sorted((m.name, m.gpu, m.port) for m in result.measurements if m.passed is False)


def test_a_healthy_node_passes_and_its_snapshot_is_the_next_baseline(run_check):
    collector = node()

    first = run_check("health", open_collector=lambda: collector, clock=Clock())

    assert first.result.passed is True, failed(first.result)
    assert (first.result.device, first.result.device_name) == ("simulated", "simulated 8 × NVIDIA H100 80GB HBM3")
    snapshot = msgspec.convert(first.result.evidence["snapshot"], NodeSample)
    assert len(snapshot.gpus) == 8
    assert len(snapshot.ports) == 8
    assert first.result.evidence["kernel_log"].startswith("not read: a simulated node")
    (gpus,) = first.named("gpus")
    assert (gpus.measured, gpus.expected) == (8, None)  # no baseline: nothing to compare the count with

    baseline = {"baseline": first.result.evidence["snapshot"]}
    second = run_check("health", baseline, open_collector=lambda: collector, clock=Clock())

    assert second.result.passed is True, failed(second.result)
    assert {m.name for m in second.result.measurements} >= {
        "ecc_uncorrected_new", "nvlink_crc_errors_new", "pcie_replays_new", "ib_link_downed_new", "xids",
    }  # fmt: skip


def test_an_uncorrectable_ecc_error_fails_it(run_check):
    collector = node("gpu-001:xid48:gpu6")
    collector.sample(T0 + 1)

    ran = run_check("health", open_collector=lambda: collector, clock=Clock())

    assert ran.result.passed is False
    assert ("ecc_uncorrected_volatile", 6, None) in failed(ran.result)
    assert ("recovery_action", 6, None) in failed(ran.result)
    (action,) = ran.named("recovery_action", gpu=6)
    assert action.evidence == {"action": "GPU reset"}  # what XID 48 asks for
    assert ran.code == 1


def test_what_went_wrong_between_baseline_and_now_fails_it(run_check):
    collector = node("gpu-001:xid79@5:gpu2 gpu-001:xid74@5:gpu4 gpu-001:xid63@5:gpu1 gpu-001:flap@5:mlx5_3")
    clock = Clock()
    baseline = run_check("health", open_collector=lambda: collector, clock=clock).result.evidence["snapshot"]
    for t in range(1, 40):
        clock.now = T0 + t
        collector.sample(clock.now)

    ran = run_check("health", {"baseline": baseline}, open_collector=lambda: collector, clock=clock)

    bad = failed(ran.result)
    assert ("gpus", None, None) in bad  # GPU 2 fell off the bus
    (gpus,) = ran.named("gpus")
    assert gpus.evidence["missing"] == [2]
    assert gpus.expected == 8
    assert ("nvlink_recovery_errors_new", 4, None) in bad
    assert ("remapped_rows_pending", 1, None) in bad
    assert ("ib_link_downed_new", None, "mlx5_3/1") in bad
    assert ("xids", 2, None) in bad  # XIDs since the baseline, from the model
    assert ("xids", 4, None) in bad


def test_ignored_ports_and_application_xids_do_not_fail_it():
    now = NodeSample(
        ts=T0,
        gpus=[GpuSample(index=0, ecc_uncorrected_volatile=0, remapped_rows_pending=False)],
        ports=[PortSample(device="mlx5_8", port=1, state="down")],
    )
    xids = [Xid(T0, 0, 13, "Graphics SM Warp Exception", "kernel log"), Xid(T0, 0, 43, "stopped", "kernel log")]

    measurements, absent = judge(now, HealthParams(ignore_ports=["mlx5_8"], since=T0 - 60), xids, xids_judged=True)

    assert all(m.passed is not False for m in measurements)
    (xid_count,) = [m for m in measurements if m.name == "xids"]
    assert (xid_count.measured, xid_count.expected) == (0, 0)
    assert "retired_pages_pending" in absent["gpu0"]  # not reported by this GPU: absent, not zero


def test_a_counter_that_went_back_counts_from_zero():
    before = NodeSample(ts=T0, gpus=[GpuSample(index=0, pcie_replay_count=5000)])
    now = NodeSample(ts=T0 + 60, gpus=[GpuSample(index=0, pcie_replay_count=7)])  # a driver reload reset it

    measurements, _ = judge(now, HealthParams(baseline=before), [], xids_judged=True)

    (replays,) = [m for m in measurements if m.name == "pcie_replays_new"]
    assert (replays.measured, replays.passed) == (7, True)


def test_without_a_start_time_xids_are_reported_not_judged():
    now = NodeSample(ts=T0, gpus=[GpuSample(index=0)])

    measurements, _ = judge(now, HealthParams(), [Xid(T0 - 9e5, 0, 79, "old", "kernel log")], xids_judged=False)

    (xids,) = [m for m in measurements if m.name == "xids"]
    assert (xids.measured, xids.expected, xids.passed) == (1, None, None)


@pytest.mark.parametrize("kernel_log", [True, False])
def test_without_nvml_it_still_reports(run_check, kernel_log):
    ran = run_check("health", {"kernel_log": kernel_log})

    assert ran.result.device == "cpu"
    assert ran.result.tool == "collectors (no NVML: InfiniBand ports only)"
    assert ran.result.evidence["kernel_log"].startswith(("read /dev/kmsg", "not readable", "not read"))
