"""The simulated backend: determinism, dynamics, the signature of every fault, wire validity, cost."""

import itertools
import statistics

import pytest

from agents.collectors.base import Collector
from agents.protocol import Events, GpuSample, Inventory, NodeSample, Telemetry, decode_agent_message, encode
from agents.simulator.collector import SimulatedCollector
from agents.simulator.faults import FaultSpecError
from agents.simulator.hardware import GPU_IDLE, RECOVERY_GPU_RESET, SW_POWER_CAP, SW_THERMAL_SLOWDOWN
from agents.simulator.model import NodeDied
from agents.simulator.profiles import PROFILES
from agents.simulator.workloads import BurnIn, Idle, Schedule, Training

T0 = 1_750_000_000.0
STEADY_TRAINING = Training(allreduce_share=0.0, checkpoint_every_s=1e9)  # no dips: cleaner comparisons


def node(faults="", *, seed=7, profile="h100", workload=None, hostname="gpu-001") -> SimulatedCollector:
    return SimulatedCollector(profile, hostname, seed=seed, faults=faults, workload=workload, start=T0)


def run(collector: SimulatedCollector, seconds: int, every: float = 1.0) -> list[NodeSample]:
    return [collector.sample(T0 + step * every) for step in range(int(seconds / every) + 1)]


def events_after(faults: str, seconds: int, seed: int = 7) -> list:
    collector = node(faults, seed=seed)
    run(collector, seconds)
    return collector.drain_events()


def gpu(sample: NodeSample, index: int):
    return next(g for g in sample.gpus if g.index == index)


def test_it_is_a_collector_that_says_it_is_simulated():
    collector: Collector = node()

    assert collector.simulated is True
    assert isinstance(collector.discover(), Inventory)


# Determinism ---------------------------------------------------------------------------------


def test_it_gives_identical_samples_events_and_inventory_for_the_same_seed():
    faults = "*:xid48~120/h, *:flap~20/h"
    first, second = node(faults), node(faults)

    assert run(first, 300) == run(second, 300)
    assert first.drain_events() == second.drain_events() != []
    assert first.discover() == second.discover()


def test_it_gives_different_samples_and_identities_for_a_different_seed_or_host():
    base = node(seed=1)
    other_seed, other_host = node(seed=2), node(seed=1, hostname="gpu-002")

    assert run(base, 20) != run(other_seed, 20)
    assert base.discover().gpus[0].uuid != other_seed.discover().gpus[0].uuid
    assert base.discover().gpus[0].serial != other_host.discover().gpus[0].serial


def test_it_draws_random_fault_times_from_the_seed():
    times = [[event.ts for event in events_after("*:xid94~60/h", 600, seed)] for seed in (1, 1, 2)]

    assert times[0] == times[1]
    assert times[0] != times[2]
    assert 3 <= len(times[0]) <= 25  # about ten in ten minutes at 60 an hour


# Dynamics ------------------------------------------------------------------------------------


def test_it_moves_power_and_memory_with_utilization():
    collector = node(workload=Schedule(((60.0, Idle()), (60.0, STEADY_TRAINING))))
    samples = run(collector, 119)
    idle, busy = samples[30].gpus[0], samples[100].gpus[0]

    assert idle.util_gpu == 0.0
    assert busy.util_gpu >= 95
    assert 60 <= idle.power_w <= 80
    assert 580 <= busy.power_w <= 660
    assert idle.mem_used_mib < 1000 < 70_000 < busy.mem_used_mib
    assert idle.throttle_reasons & GPU_IDLE
    assert not busy.throttle_reasons & GPU_IDLE
    assert idle.sm_clock_mhz == 345
    assert busy.sm_clock_mhz == 1980


def test_it_dips_utilization_at_each_all_reduce_and_checkpoint():
    collector = node(workload=Training(step_s=6.0, allreduce_share=0.2, checkpoint_every_s=300, checkpoint_s=20))
    utils = [sample.gpus[0].util_gpu for sample in run(collector, 299)]

    assert utils[5] < 80
    assert utils[11] < 80
    assert utils[3] > 95
    assert max(utils[281:299]) < 15  # the checkpoint, the last 20 s of every 300
    assert sum(util > 95 for util in utils) > 200


def test_it_lags_temperature_behind_power_by_about_30_seconds():
    collector = node(workload=Schedule(((100.0, Idle()), (300.0, BurnIn()))))
    temps = [sample.gpus[0].temp_c for sample in run(collector, 399)]
    cold, hot = temps[99], temps[399]

    assert hot - cold > 30
    assert temps[101] - cold < 0.15 * (hot - cold)  # power jumped, temperature has barely moved
    assert (temps[130] - cold) / (hot - cold) == pytest.approx(0.63, abs=0.08)  # one time constant
    assert (temps[250] - cold) / (hot - cold) > 0.98


def test_it_caps_power_at_the_limit_under_burn_in():
    (sample,) = run(node(workload=BurnIn()), 0)

    assert all(g.power_w <= 700.0 and g.throttle_reasons & SW_POWER_CAP for g in sample.gpus)
    assert all(1650 < g.sm_clock_mhz < 1980 for g in sample.gpus)


def test_it_throttles_a_gpu_above_the_slowdown_temperature():
    collector = node("gpu-001:thermal@60:gpu3", workload=STEADY_TRAINING)
    samples = run(collector, 400)
    before, after = gpu(samples[59], 3), gpu(samples[400], 3)
    neighbour = gpu(samples[400], 4)

    assert before.temp_c < 80
    assert not before.throttle_reasons & SW_THERMAL_SLOWDOWN
    assert 85 < after.temp_c < 95  # hot, held a few degrees over the threshold by the throttling
    assert after.throttle_reasons & SW_THERMAL_SLOWDOWN
    assert after.sm_clock_mhz < 0.9 * before.sm_clock_mhz
    assert after.power_w < before.power_w - 50
    assert neighbour.temp_c < 80
    assert neighbour.sm_clock_mhz == 1980
    climb = [gpu(s, 3).temp_c for s in samples[60:200]]
    assert max(later - earlier for earlier, later in itertools.pairwise(climb)) <= 1  # gradual


def test_it_ends_a_condition_after_its_duration():
    collector = node("gpu-001:thermal@10+100:gpu1", workload=STEADY_TRAINING)
    samples = run(collector, 400)

    assert gpu(samples[100], 1).temp_c > 80
    assert gpu(samples[400], 1).temp_c < 75
    assert not gpu(samples[400], 1).throttle_reasons & SW_THERMAL_SLOWDOWN


# Faults: each with the signature the hardware gives ----------------------------------------


def test_xid_79_reports_the_event_and_the_gpu_disappears():
    collector = node("gpu-001:gpu2:xid79@120")
    samples = run(collector, 200)

    assert [g.index for g in samples[119].gpus] == list(range(8))
    assert [g.index for g in samples[120].gpus] == [0, 1, 3, 4, 5, 6, 7]
    assert [g.index for g in samples[200].gpus] == [0, 1, 3, 4, 5, 6, 7]
    assert [g.index for g in collector.discover().gpus] == [0, 1, 3, 4, 5, 6, 7]
    assert [(e.kind, e.xid, e.gpu_index, e.ts) for e in collector.drain_events()] == [("xid", 79, 2, T0 + 120)]


@pytest.mark.parametrize(("xid", "recovery_action"), [(48, 1), (94, 0), (95, 4)])
def test_an_ecc_xid_raises_the_uncorrected_counters(xid, recovery_action):
    collector = node(f"gpu-001:gpu6:xid{xid}@30")
    samples = run(collector, 40)
    before, after = gpu(samples[29], 6), gpu(samples[40], 6)

    assert after.ecc_uncorrected_volatile == before.ecc_uncorrected_volatile + 1
    assert after.ecc_uncorrected_aggregate == before.ecc_uncorrected_aggregate + 1
    assert after.recovery_action == recovery_action
    assert gpu(samples[40], 5).ecc_uncorrected_volatile == 0
    assert [(e.xid, e.gpu_index) for e in collector.drain_events()] == [(xid, 6)]


def test_xid_63_marks_a_row_remapping_pending():
    collector = node("gpu-001:gpu0:xid63@10")
    samples = run(collector, 20)

    assert not samples[9].gpus[0].remapped_rows_pending
    assert samples[20].gpus[0].remapped_rows_pending
    assert samples[20].gpus[0].remapped_rows_uncorrectable == samples[9].gpus[0].remapped_rows_uncorrectable + 1
    assert samples[20].gpus[0].recovery_action == 1
    assert [(e.xid, e.gpu_index, e.data) for e in collector.drain_events()] == [
        (63, 0, "Row Remapper: New row marked for remapping, reset GPU to activate.")
    ]


def test_xid_64_marks_row_remapping_failed():
    collector = node("gpu-001:gpu7:xid64@10")
    samples = run(collector, 20)

    assert not gpu(samples[9], 7).remapped_rows_failed
    assert gpu(samples[20], 7).remapped_rows_failed
    assert [(e.xid, e.gpu_index) for e in collector.drain_events()] == [(64, 7)]


def test_xid_74_raises_nvlink_error_counters_and_takes_a_link_down():
    collector = node("gpu-001:gpu4:xid74@10")
    samples = run(collector, 20)
    before, after = gpu(samples[9], 4), gpu(samples[20], 4)

    assert after.nvlink_crc_errors > before.nvlink_crc_errors
    assert after.nvlink_replay_errors > before.nvlink_replay_errors
    assert after.nvlink_recovery_errors == before.nvlink_recovery_errors + 1
    (event,) = collector.drain_events()
    assert (event.xid, event.gpu_index) == (74, 4)
    inactive = [link for link in collector.discover().gpus[4].nvlinks if not link.active]
    assert len(inactive) == 1
    assert inactive[0].peer_pci_bus_id is None
    assert f"link {inactive[0].link}" in event.data
    assert all(link.active for link in collector.discover().gpus[3].nvlinks)


def test_a_straggler_draws_about_50_watts_under_its_siblings_median_under_load():
    collector = node("gpu-001:straggler:gpu5", workload=STEADY_TRAINING)
    samples = run(collector, 120)[1:]

    deficits = [statistics.median(g.power_w for g in s.gpus if g.index != 5) - gpu(s, 5).power_w for s in samples]
    assert statistics.mean(deficits) == pytest.approx(50, abs=8)
    assert min(deficits) > 30
    assert all(gpu(s, 5).sm_clock_mhz < 0.95 * gpu(s, 4).sm_clock_mhz for s in samples)


def test_a_straggler_is_not_visible_when_the_node_is_idle():
    collector = node("gpu-001:straggler:gpu5", workload=Idle())
    (sample,) = run(collector, 0)

    assert abs(gpu(sample, 5).power_w - statistics.median(g.power_w for g in sample.gpus)) < 12


def test_a_ports_data_counters_add_up_what_its_rates_carried():
    collector = node(workload=STEADY_TRAINING)
    samples = run(collector, 10)
    port = [s.ports[0] for s in samples]

    assert (port[0].tx_bytes, port[0].rx_bytes) == (0, 0)
    for before, after in itertools.pairwise(port):  # one second apart; the rates are rounded to 0.01
        assert after.tx_bytes - before.tx_bytes == pytest.approx(after.tx_gbps * 1e9 / 8, rel=1e-3)
        assert after.rx_bytes - before.rx_bytes == pytest.approx(after.rx_gbps * 1e9 / 8, rel=1e-3)
    assert port[-1].tx_bytes > 0


def test_a_flapping_link_alternates_down_and_active_and_counts_the_downs():
    collector = node("gpu-001:flap@30+120:mlx5_3")
    samples = run(collector, 200)
    states = [s.ports[3].state for s in samples]
    port = [s.ports[3] for s in samples]

    assert set(states[:30]) == {"active"}
    assert set(states[151:]) == {"active"}
    assert states[30:150].count("down") == 30
    assert states[30:150].count("active") == 90
    assert port[29].link_downed == 0
    assert port[200].link_downed == 10
    assert port[200].symbol_errors >= 200
    assert port[200].rcv_errors >= 0
    assert all(p.tx_gbps == 0.0 for p, state in zip(port, states, strict=True) if state == "down")
    assert all(s.ports[2].state == "active" and s.ports[2].link_downed == 0 for s in samples)
    events = collector.drain_events()
    assert len(events) == 20
    assert {(e.kind, e.port_device) for e in events} == {("port", "mlx5_3")}
    assert events[0].data == "mlx5_3 port 1: state active → down; link went down 1 time"
    assert (events[0].port, events[0].previous_port_state, events[0].port_state, events[0].link_downs) == (
        1,
        "active",
        "down",
        1,
    )


def test_a_flapping_link_shows_down_in_the_inventory_while_down():
    collector = node("gpu-001:flap@0:mlx5_0")
    collector.sample(T0 + 1)
    (port, *others) = collector.discover().ports

    assert (port.state, port.physical_state) == ("down", "LinkErrorRecovery")
    assert {(p.state, p.physical_state) for p in others} == {("active", "LinkUp")}


def test_a_node_that_dies_raises_node_died_from_then_on():
    collector = node("gpu-001:die@300")
    run(collector, 299)
    assert not collector.dead

    with pytest.raises(NodeDied) as died:
        collector.sample(T0 + 300)
    with pytest.raises(NodeDied):
        collector.sample(T0 + 301)
    with pytest.raises(NodeDied):
        collector.discover()
    assert died.value.at == T0 + 300
    assert collector.dead


def test_it_applies_only_the_faults_for_its_own_host():
    spec = "gpu-002:die@1, gpu-001:gpu1:xid48@1"
    mine, other = node(spec), node(spec, hostname="gpu-002")

    run(mine, 5)
    assert [e.xid for e in mine.drain_events()] == [48]
    with pytest.raises(NodeDied):
        run(other, 5)


def test_it_picks_an_unnamed_gpu_by_the_seed():
    picks = {seed: [event.gpu_index for event in events_after("gpu-001:xid48@5", 6, seed)] for seed in range(12)}

    assert all(len(pick) == 1 for pick in picks.values())
    assert len({pick[0] for pick in picks.values()}) > 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpu-001:gpu8:xid79@1", "gpu-001 has GPUs gpu0 to gpu7"),
        ("gpu-001:flap:mlx5_9", "gpu-001 has no port 'mlx5_9'; it has mlx5_0, mlx5_1"),
    ],
)
def test_it_refuses_a_fault_the_node_cannot_have(spec, message):
    with pytest.raises(FaultSpecError, match=message):
        node(spec)


# Identity and the wire -----------------------------------------------------------------------


def test_it_describes_an_hgx_h100_node():
    inventory = node().discover()

    assert [g.pci_bus_id for g in inventory.gpus] == [
        f"0000:{bus}:00.0" for bus in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
    ]
    assert {g.name for g in inventory.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {(g.memory_mib, g.power_limit_w, g.pcie_gen, g.pcie_width) for g in inventory.gpus} == {
        (81559, 700.0, 5, 16)
    }
    assert len({g.uuid for g in inventory.gpus}) == 8
    assert len({g.serial for g in inventory.gpus}) == 8
    assert [len(g.nvlinks) for g in inventory.gpus] == [18] * 8
    assert {link.peer_pci_bus_id for link in inventory.gpus[0].nvlinks} == {f"0000:0{n}:00.0" for n in (5, 6, 7, 8)}
    assert [(p.device, p.kind, p.rate_gbps, p.state) for p in inventory.ports] == [
        *[(f"mlx5_{n}", "infiniband", 400.0, "active") for n in range(8)],
        ("mlx5_8", "ethernet", 200.0, "active"),  # the frontend NIC
    ]
    assert inventory.host.driver_version == "550.90.07"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_everything_it_produces_is_valid_on_the_wire(profile):
    faults = (
        "gpu-001:gpu1:xid79@20, gpu-001:gpu2:xid48@25, gpu-001:gpu2:xid94@26, gpu-001:gpu2:xid95@27, "
        "gpu-001:gpu3:xid63@30, gpu-001:gpu3:xid64@31, gpu-001:gpu4:xid74@35, gpu-001:gpu5:thermal@5, "
        "gpu-001:gpu6:straggler, gpu-001:flap@10:mlx5_1, gpu-001:die@590"
    )
    collector = node(faults, profile=profile, workload=Schedule(((60.0, BurnIn()), (60.0, Idle())), repeat=True))
    samples, inventories = [], []
    for step in range(0, 590, 2):
        samples.append(collector.sample(T0 + step))
        inventories.append(collector.discover())

    for seq, start in enumerate(range(0, len(samples), 100), start=1):
        frame = Telemetry(seq=seq, samples=samples[start : start + 100])
        assert decode_agent_message(encode(frame)) == frame
    for inventory in inventories[::25]:
        assert decode_agent_message(encode(inventory)) == inventory
    events = Events(seq=1, events=collector.drain_events())
    assert decode_agent_message(encode(events)) == events
    assert {e.xid for e in events.events} == {79, 48, 94, 95, 63, 64, 74, None}


def test_its_gpu_samples_hold_each_value_in_its_own_field():
    """The model builds its GpuSamples positionally, in the order below: a field added, removed or moved
    in the protocol fails here until ``NodeModel._sample_gpus`` follows it."""
    assert GpuSample.__struct_fields__ == (
        "index", "util_gpu", "util_mem", "mem_used_mib", "temp_c", "power_w", "power_limit_w", "sm_clock_mhz",
        "mem_clock_mhz", "throttle_reasons", "ecc_corrected_volatile", "ecc_uncorrected_volatile",
        "ecc_corrected_aggregate", "ecc_uncorrected_aggregate", "retired_pages_pending", "remapped_rows_pending",
        "remapped_rows_failed", "remapped_rows_correctable", "remapped_rows_uncorrectable", "pcie_replay_count",
        "nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors", "pcie_tx_kbps", "pcie_rx_kbps",
        "nvlink_tx_kbps", "nvlink_rx_kbps", "recovery_action",
    )  # fmt: skip
    profile = PROFILES["h100"]
    hit = gpu(run(node("gpu-001:gpu4:xid74@5, gpu-001:gpu4:xid63@6", workload=BurnIn()), 10)[-1], 4)

    assert (hit.index, hit.power_limit_w, hit.mem_clock_mhz) == (4, profile.power_limit_w, profile.mem_clock_mhz)
    assert hit.retired_pages_pending is None  # these GPUs remap rows instead
    assert (hit.remapped_rows_pending, hit.remapped_rows_failed, hit.remapped_rows_uncorrectable) == (True, False, 1)
    assert (hit.nvlink_crc_errors >= 20, hit.nvlink_replay_errors >= 5, hit.nvlink_recovery_errors) == (True, True, 1)
    assert hit.recovery_action == RECOVERY_GPU_RESET
    assert (hit.util_gpu >= 95, hit.power_w > profile.idle_power_w) == (True, True)
    assert hit.throttle_reasons & SW_POWER_CAP
    assert hit.sm_clock_mhz % 15 == 0
    assert 0 < hit.pcie_tx_kbps < hit.pcie_rx_kbps
    assert hit.nvlink_tx_kbps == hit.nvlink_rx_kbps == 0  # a burn-in leaves the fabric idle
