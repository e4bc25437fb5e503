"""A simulated node's check results: labelled simulated, computed from its model in-process, and
its scripted faults failing the checks they would fail on a real node."""

import pytest

from agents.executors.compute import GPU_DTYPES
from agents.simulator.checks import FIGURES, healthy_burn_in_clock, nominal_duration_s, simulate_check
from agents.simulator.collector import SimulatedCollector
from agents.simulator.model import NodeModel
from agents.simulator.profiles import H100
from agents.simulator.workloads import BurnIn, Idle

T0 = 1_780_000_000.0


def node(faults: str = "", profile: str = "h100", warm_s: int = 60) -> SimulatedCollector:
    collector = SimulatedCollector(profile, "sim-0007", seed=11, faults=faults, start=T0)
    for t in range(warm_s):  # the node has been running its training job
        collector.sample(T0 + t)
    return collector


def check(collector: SimulatedCollector, name: str, params: dict | None = None):
    return simulate_check(collector, name, params, now=T0 + 100)


def by_gpu(result, name: str) -> dict[int | None, float]:
    return {m.gpu: m.measured for m in result.measurements if m.name == name}


@pytest.mark.parametrize(
    "name", ["compute", "memory_bandwidth", "pcie", "nvlink", "nccl_allreduce", "health", "storage", "gpu_burn"]
)
def test_every_result_says_simulated(name):
    result = check(node(), name, {"duration_s": 10} if name in ("compute", "gpu_burn") else None)

    assert result.device == "simulated"
    assert result.tool == "simulator"
    assert result.device_name.startswith("simulated ")
    assert result.error is None
    assert result.measurements
    assert result.passed is not False, [m for m in result.measurements if m.passed is False]
    assert result.started == T0 + 100
    assert result.finished == T0 + 100 + nominal_duration_s(name, _params(name, result))


def _params(name, result):
    from agents.executors.checks import CHECKS
    from agents.executors.params import decode_params

    return decode_params(CHECKS[name].params, {"duration_s": 10} if name in ("compute", "gpu_burn") else None)


def test_a_healthy_nodes_figures_are_its_profiles_within_a_few_percent():
    collector = node(profile="b200")
    figures = FIGURES["b200"]

    compute = check(collector, "compute", {"duration_s": 30, "dtypes": ["bf16"]})
    pcie = check(collector, "pcie")
    nvlink = check(collector, "nvlink")

    for rate in by_gpu(compute, "tflops_bf16").values():
        assert rate == pytest.approx(figures.tflops["bf16"], rel=0.03)
    assert all(rate == pytest.approx(figures.h2d_gbps, rel=0.02) for rate in by_gpu(pcie, "h2d").values())
    assert len(nvlink.measurements) == 8 * 7
    assert all(m.measured == pytest.approx(figures.p2p_gbps, rel=0.03) for m in nvlink.measurements)


def test_a_straggler_computes_about_ten_percent_slower_than_its_siblings():
    result = check(node("sim-0007:straggler:gpu3"), "compute", {"duration_s": 20, "dtypes": ["bf16"]})

    rates = by_gpu(result, "tflops_bf16")
    siblings = [rate for gpu, rate in rates.items() if gpu != 3]
    assert rates[3] < 0.92 * min(siblings)
    assert rates[3] > 0.85 * min(siblings)


def test_a_gpu_whose_cooling_failed_throttles_drops_and_fails():
    result = check(node("sim-0007:thermal:gpu5"), "compute", {"duration_s": 60, "dtypes": ["bf16", "fp16"]})

    failed = {(m.name, m.gpu) for m in result.measurements if m.passed is False}
    assert ("throttled_samples", 5) in failed
    assert result.passed is False
    (throttled,) = [m for m in result.measurements if m.name == "throttled_samples" and m.gpu == 5]
    assert "sw_thermal_slowdown" in throttled.evidence["reasons_seen"]
    temps = by_gpu(result, "max_temp_c")
    assert temps[5] > H100.slowdown_c > max(t for gpu, t in temps.items() if gpu != 5)
    assert by_gpu(result, "tflops_bf16")[5] < 0.9 * by_gpu(result, "tflops_bf16")[4]


def test_a_cold_gpu_that_heats_into_throttling_shows_a_drop_over_the_run():
    faults = "sim-0007:thermal:gpu5"
    collector = SimulatedCollector("h100", "sim-0007", seed=11, faults=faults, workload=Idle(), start=T0)
    collector.sample(T0)  # idle: cool, until the stress starts

    result = check(collector, "gpu_burn", {"duration_s": 120})

    (drop,) = [m for m in result.measurements if m.name == "tflops_drop_tf32" and m.gpu == 5]
    assert drop.measured > 0.1
    assert drop.passed is False
    assert result.evidence["instead_of_gpu_burn"].startswith("gpu-burn is not on PATH")


def test_an_ecc_fault_fails_health_and_computes_wrong():
    collector = node("sim-0007:xid48@10:gpu6")

    health = check(collector, "health")
    compute = check(collector, "compute", {"duration_s": 10, "dtypes": ["bf16"]})

    assert health.passed is False
    assert {(m.name, m.gpu) for m in health.measurements if m.passed is False} == {
        ("ecc_uncorrected_volatile", 6), ("recovery_action", 6),
    }  # fmt: skip
    assert by_gpu(compute, "mismatches_bf16")[6] > 0


def test_health_since_a_baseline_sees_the_xids_in_between():
    collector = node("sim-0007:xid79@80:gpu2")
    before = simulate_check(collector, "health", None, now=T0 + 59)
    for t in range(60, 100):
        collector.sample(T0 + t)

    after = check(collector, "health", {"baseline": before.evidence["snapshot"]})

    failed = {(m.name, m.gpu) for m in after.measurements if m.passed is False}
    assert ("gpus", None) in failed
    assert ("xids", 2) in failed
    assert check(collector, "compute", {"duration_s": 10, "dtypes": ["bf16"]}).measurements  # runs on the rest
    assert 2 not in by_gpu(check(collector, "memory_bandwidth"), "copy")


def test_a_pcie_link_trained_at_x8_halves_host_to_device_bandwidth():
    result = check(node("sim-0007:x8:gpu1"), "pcie", {"min_h2d_gbps": 52})

    h2d = by_gpu(result, "h2d")
    assert h2d[1] == pytest.approx(h2d[0] / 2, rel=0.02)
    assert [m.gpu for m in result.measurements if m.passed is False] == [1]
    (link,) = [m for m in result.measurements if m.name == "h2d" and m.gpu == 1]
    assert (link.evidence["pcie_width_current"], link.evidence["pcie_width"]) == (8, 16)


def test_an_nvlink_fault_shows_in_p2p_and_the_all_reduce():
    collector = node("sim-0007:xid74@10:gpu4")

    nvlink = check(collector, "nvlink")
    allreduce = check(collector, "nccl_allreduce", {"theoretical_busbw_gbps": 600})

    slow = {(m.gpu, m.peer) for m in nvlink.measurements if m.measured < 0.97 * FIGURES["h100"].p2p_gbps}
    assert slow == {(i, j) for i in range(8) for j in range(8) if i != j and 4 in (i, j)}
    (busbw,) = [m for m in allreduce.measurements if m.name == "busbw"]
    assert busbw.measured < 0.97 * FIGURES["h100"].busbw_gbps
    assert busbw.passed is False  # under 80 % of 600


def test_across_nodes_it_measures_the_ring_too_and_a_flapping_port_shows():
    params = {"nnodes": 4, "node_rank": 2, "rendezvous": "sim-0001:29500", "sizes_bytes": [1 << 30]}
    healthy = check(node(), "nccl_allreduce", params)
    flapping = node("sim-0007:flap@5:mlx5_3")
    for t in range(60, 101):
        flapping.sample(T0 + t)
        if flapping.model.ports[3].state == "down":
            break

    degraded = check(flapping, "nccl_allreduce", params)

    names = {m.name: m for m in healthy.measurements}
    assert {"busbw", "busbw_ring", "wrong_elements", "wrong_elements_ring"} <= set(names)
    assert names["busbw_ring"].evidence["algorithm"] == "Ring (NCCL_ALGO=Ring)"
    assert names["busbw"].measured > names["busbw_ring"].measured  # NCCL's own choice beats the ring
    assert names["busbw_ring"].measured < 400 / 8  # a ring is bound by a GPU's 400 Gb/s NIC
    ring = {m.name: m.measured for m in degraded.measurements}["busbw_ring"]
    assert ring < names["busbw_ring"].measured


def test_the_simulated_burn_in_settles_where_the_model_does():
    model = NodeModel(H100, "reference", 0, BurnIn(), start=0.0)
    for t in range(0, 1201, 10):
        samples, _ = model.sample(float(t))

    assert healthy_burn_in_clock(H100) == pytest.approx(sum(s.sm_clock_mhz for s in samples) / 8, rel=0.01)


def test_dcgm_is_not_on_a_simulated_node_and_bad_params_are_an_error():
    assert check(node(), "dcgm_diag").skipped.startswith("dcgmi is not on PATH")
    assert "bad parameters" in check(node(), "compute", {"dtypes": ["fp8"]}).error
    with pytest.raises(ValueError, match="Unknown check"):
        check(node(), "astrology")


def test_default_compute_covers_every_gpu_dtype():
    result = check(node(), "compute", {"duration_s": 10})

    assert {m.name for m in result.measurements if m.name.startswith("tflops_") and "drop" not in m.name} == {
        f"tflops_{dtype}" for dtype in GPU_DTYPES
    }
