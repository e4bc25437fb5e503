"""The real NVML collector against a fake NVML patched into pynvml (autospec): field mapping,
discovery, lost GPUs, XID events, and the cost of a sample. A NOT_SUPPORTED answer from each function
it calls: test_nvml_unsupported.py."""

import pynvml
import pytest

from agents.collectors.nvml import NvmlCollector, NvmlUnavailable
from agents.protocol import GpuSample, Inventory, Telemetry, decode_agent_message, encode
from tests.agents.fakes import FakeGpu, FakeNvml
from tests.agents.nvml_sampling import ALL_FIELDS, T0, collect, present

P = pynvml


# Mapping -------------------------------------------------------------------------------------


def test_it_maps_every_field_of_an_h100_sample(nvml):
    _, (_, second) = collect(nvml)

    gpu = second.gpus[0]
    assert gpu == GpuSample(
        index=0,
        util_gpu=87.0,
        util_mem=45.0,
        mem_used_mib=71234,
        temp_c=64.0,
        power_w=612.345,
        power_limit_w=690.0,
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        throttle_reasons=0x4,
        ecc_corrected_volatile=3,
        ecc_uncorrected_volatile=1,
        ecc_corrected_aggregate=17,
        ecc_uncorrected_aggregate=2,
        retired_pages_pending=False,
        remapped_rows_pending=True,
        remapped_rows_failed=False,
        remapped_rows_correctable=4,
        remapped_rows_uncorrectable=1,
        pcie_replay_count=5,
        nvlink_crc_errors=2 * 17,  # summed over the 17 active links
        nvlink_replay_errors=17,
        nvlink_recovery_errors=0,
        pcie_tx_kbps=10_000_000,  # 10 GB/s
        pcie_rx_kbps=20_000_000,
        nvlink_tx_kbps=pytest.approx(100_000_000, rel=1e-6),  # 100 GB/s, counted by NVML in KiB
        nvlink_rx_kbps=pytest.approx(50_000_000, rel=1e-6),
        recovery_action=0,
    )
    assert [g.index for g in second.gpus] == list(range(8))
    assert second.ts == T0 + 1


def test_it_has_no_rates_on_the_first_sample():
    fake = FakeNvml()
    with fake.patched():
        _, (first, _) = collect(fake)

    assert {"pcie_tx_kbps", "pcie_rx_kbps", "nvlink_tx_kbps", "nvlink_rx_kbps"} == ALL_FIELDS - present(first.gpus[0])


def test_its_rates_are_over_the_time_nvml_stamped_the_counters_with_when_it_gives_one():
    gpu = FakeGpu(0, read_at_us=1_760_000_000 * 10**6)
    fake = FakeNvml([gpu])
    with fake.patched():
        collector = NvmlCollector(hostname="gpu-001")
        collector.sample(T0)
        gpu.advance(1.0)
        gpu.read_at_us += 2 * 10**6  # the driver read the counters 2 s apart, though the samples are 1 s apart
        second = collector.sample(T0 + 1).gpus[0]

    assert (second.pcie_tx_kbps, second.pcie_rx_kbps) == (5_000_000, 10_000_000)
    assert second.nvlink_tx_kbps == pytest.approx(50_000_000, rel=1e-6)


def test_it_reads_all_links_in_one_field_value_batch_per_gpu(nvml):
    collector, _ = collect(nvml)
    batch = nvml.mocks["nvmlDeviceGetFieldValues"]
    batch.reset_mock()

    collector.sample(T0 + 2)

    assert batch.call_count == 8
    requested = batch.call_args.args[1]
    assert (P.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF) in requested  # all links, not link 0
    assert nvml.mocks["nvmlDeviceGetNvLinkErrorCounter"].call_count == 0
    assert nvml.mocks["nvmlDeviceGetTotalEccErrors"].call_count == 0


def test_it_samples_and_discovers_messages_valid_on_the_wire(nvml):
    collector, samples = collect(nvml)

    telemetry = decode_agent_message(encode(Telemetry(seq=1, samples=samples)))
    inventory = decode_agent_message(encode(collector.discover()))

    assert telemetry.samples == samples
    assert isinstance(inventory, Inventory)


# Discovery -----------------------------------------------------------------------------------


def test_it_discovers_each_gpu_with_its_nvlinks_and_pcie_link(nvml):
    inventory = NvmlCollector(hostname="gpu-001").discover()

    gpu = inventory.gpus[1]
    assert gpu.uuid == nvml.gpus[1].uuid
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.serial == "1654922040701"
    assert gpu.memory_mib == 81559
    assert gpu.pci_bus_id == "0000:2a:00.0"
    assert gpu.power_limit_w == 700.0
    assert (gpu.pcie_gen, gpu.pcie_width, gpu.pcie_width_current) == (5, 16, 8)
    assert gpu.slowdown_temp_c == 87  # the slowdown threshold, not the shutdown or the max-operating one
    assert [link.link for link in gpu.nvlinks] == list(range(18))
    assert [link.link for link in gpu.nvlinks if not link.active] == [3]
    assert gpu.nvlinks[3].peer_pci_bus_id is None
    assert gpu.nvlinks[0].peer_pci_bus_id == "0000:05:00.0"
    assert gpu.nvlinks[17].peer_pci_bus_id == "0000:06:00.0"
    assert (inventory.host.hostname, inventory.host.driver_version, inventory.host.cuda_version) == (
        "gpu-001",
        "550.90.07",
        "12.4",
    )


def test_it_asks_only_the_links_a_gpu_has_after_the_first_discovery(nvml):
    collector = NvmlCollector(hostname="gpu-001")
    link_state = nvml.mocks["nvmlDeviceGetNvLinkState"]
    assert link_state.call_count == 8 * pynvml.NVML_NVLINK_MAX_LINKS
    link_state.reset_mock()

    collector.discover()

    assert link_state.call_count == 8 * 18


def test_it_reports_a_gpu_without_nvlink_with_no_links_and_no_nvlink_counters():
    fake = FakeNvml([FakeGpu(0, unsupported={"nvmlDeviceGetNvLinkState"})])
    fake.gpus[0].field_status = {
        field_id: pynvml.NVML_ERROR_NOT_SUPPORTED
        for field_id in (
            P.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
            P.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
            P.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
            P.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            P.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        )
    }
    with fake.patched() as mocks:
        collector, (_, second) = collect(fake)
        assert collector.discover().gpus[0].nvlinks == []
        assert mocks["nvmlDeviceGetNvLinkState"].call_count == 1  # link 0 said "no NVLink": never asked again
        assert mocks["nvmlDeviceGetNvLinkErrorCounter"].call_count == 0

    assert ALL_FIELDS - present(second.gpus[0]) == {
        "nvlink_crc_errors",
        "nvlink_replay_errors",
        "nvlink_recovery_errors",
        "nvlink_tx_kbps",
        "nvlink_rx_kbps",
    }  # absent, not zero


# discovery function -> what the inventory shows when it answers NOT_SUPPORTED (for GPU 0)
DISCOVERY_CASES = {
    "nvmlDeviceGetName": lambda inv: inv.gpus[0].name == "NVIDIA GPU",
    "nvmlDeviceGetSerial": lambda inv: inv.gpus[0].serial is None,
    "nvmlDeviceGetMemoryInfo": lambda inv: inv.gpus[0].memory_mib is None,
    "nvmlDeviceGetPciInfo": lambda inv: inv.gpus[0].pci_bus_id is None,
    "nvmlDeviceGetPowerManagementLimit": lambda inv: inv.gpus[0].power_limit_w is None,
    "nvmlDeviceGetMaxPcieLinkGeneration": lambda inv: inv.gpus[0].pcie_gen is None,
    "nvmlDeviceGetMaxPcieLinkWidth": lambda inv: inv.gpus[0].pcie_width is None,
    "nvmlDeviceGetCurrPcieLinkWidth": lambda inv: inv.gpus[0].pcie_width_current is None,
    "nvmlDeviceGetTemperatureThreshold": lambda inv: inv.gpus[0].slowdown_temp_c is None,
    "nvmlDeviceGetNvLinkState": lambda inv: inv.gpus[0].nvlinks == [],
    "nvmlDeviceGetNvLinkRemotePciInfo": lambda inv: {link.peer_pci_bus_id for link in inv.gpus[0].nvlinks} == {None},
    "nvmlDeviceGetUUID": lambda inv: [gpu.index for gpu in inv.gpus] == [1],  # no UUID, no inventory entry
}


@pytest.mark.parametrize("function", sorted(DISCOVERY_CASES))
def test_it_leaves_out_a_discovery_fact_nvml_cannot_give(function):
    fake = FakeNvml([FakeGpu(0, unsupported={function}), FakeGpu(1)])
    with fake.patched():
        inventory = NvmlCollector(hostname="gpu-001").discover()

    assert DISCOVERY_CASES[function](inventory)
    assert inventory.gpus[-1].index == 1
    assert inventory.gpus[-1].serial == fake.gpus[1].serial
    assert len(inventory.gpus[-1].nvlinks) == 18
    assert decode_agent_message(encode(inventory)) == inventory


@pytest.mark.parametrize(
    ("functions", "driver", "cuda"),
    [
        ({"nvmlSystemGetDriverVersion"}, None, "12.4"),
        ({"nvmlSystemGetCudaDriverVersion_v2"}, "550.90.07", "12.4"),  # the older function answers
        ({"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"}, "550.90.07", None),
    ],
)
def test_it_leaves_out_driver_facts_nvml_cannot_give(functions, driver, cuda):
    fake = FakeNvml()
    fake.unsupported = functions
    with fake.patched():
        host = NvmlCollector(hostname="gpu-001").discover().host

    assert (host.driver_version, host.cuda_version) == (driver, cuda)


def test_it_samples_without_xid_events_when_nvml_has_no_event_sets(caplog):
    fake = FakeNvml()
    fake.unsupported = {"nvmlEventSetCreate"}
    fake.events.append((0, 13))
    with fake.patched():
        collector, (_, second) = collect(fake)
        events = collector.drain_events()

    assert events == []
    assert len(second.gpus) == 8
    assert "XID events will not be reported" in caplog.text


def test_it_reports_xid_events_from_the_gpus_that_can_register_for_them(caplog):
    fake = FakeNvml([FakeGpu(0, unsupported={"nvmlDeviceRegisterEvents"}), FakeGpu(1)])
    with fake.patched():
        NvmlCollector(hostname="gpu-001")

    assert fake.registered == [1]
    assert "GPU 0 cannot report XID events" in caplog.text


def test_it_leaves_out_a_reading_the_protocol_would_refuse_and_keeps_the_frame_valid(caplog):
    gpu = FakeGpu(0, temperature=255, recovery_action=99, power_limit_mw=9_000_000)  # a broken sensor
    fake = FakeNvml([gpu])
    with fake.patched():
        collector, samples = collect(fake)
        inventory = collector.discover()

    assert ALL_FIELDS - present(samples[1].gpus[0]) == {"temp_c", "recovery_action"}
    assert inventory.gpus[0].power_limit_w is None
    assert decode_agent_message(encode(Telemetry(seq=1, samples=samples))).samples == samples
    assert decode_agent_message(encode(inventory)) == inventory
    assert "temp_c = 255.0 is outside the protocol's range" in caplog.text


def test_it_says_clearly_when_nvml_cannot_start():
    fake = FakeNvml()
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with fake.patched(), pytest.raises(NvmlUnavailable, match="NVIDIA driver"):
        NvmlCollector(hostname="gpu-001")


# Lost GPUs and XID events --------------------------------------------------------------------


@pytest.mark.parametrize("where", ["function", "field value"])
def test_it_reports_a_lost_gpu_as_xid_79_and_leaves_it_out_from_then_on(nvml, where):
    collector = NvmlCollector(hostname="gpu-001")
    collector.sample(T0)
    if where == "function":
        nvml.gpus[5].lost = True
    else:
        nvml.gpus[5].field_status = {P.NVML_FI_DEV_PCIE_REPLAY_COUNTER: pynvml.NVML_ERROR_GPU_IS_LOST}

    during = collector.sample(T0 + 1)
    events = collector.drain_events()
    nvml.mocks["nvmlDeviceGetUtilizationRates"].reset_mock()
    after = collector.sample(T0 + 2)

    assert [gpu.index for gpu in during.gpus] == [0, 1, 2, 3, 4, 6, 7]
    assert [(e.kind, e.xid, e.gpu_index, e.ts) for e in events] == [("xid", 79, 5, T0 + 1)]
    assert [gpu.index for gpu in after.gpus] == [0, 1, 2, 3, 4, 6, 7]
    assert nvml.mocks["nvmlDeviceGetUtilizationRates"].call_count == 7
    assert [gpu.index for gpu in collector.discover().gpus] == [0, 1, 2, 3, 4, 6, 7]
    assert collector.drain_events() == []


def test_it_drains_xid_events_oldest_first(nvml):
    collector = NvmlCollector(hostname="gpu-001")
    nvml.events.extend([(0, 13), (6, 48), (0, 31)])

    first = collector.drain_events()
    second = collector.drain_events()

    assert [(e.kind, e.gpu_index, e.xid) for e in first] == [("xid", 0, 13), ("xid", 6, 48), ("xid", 0, 31)]
    assert second == []
    assert nvml.registered == list(range(8))
    assert all(call.args[1] == 0 for call in nvml.mocks["nvmlEventSetWait_v2"].call_args_list)  # never blocks


def test_it_reports_xid_79_once_when_the_event_and_the_lost_gpu_both_say_so(nvml):
    collector = NvmlCollector(hostname="gpu-001")
    nvml.events.append((2, 79))
    nvml.gpus[2].lost = True

    collector.sample(T0)
    events = collector.drain_events()

    assert [(e.xid, e.gpu_index) for e in events] == [(79, 2)]


def test_it_asks_nvml_nine_times_per_gpu_and_sample(nvml):
    """What the agent's CPU budget rests on (its time is benchmarks/nvml_collector.py's): eight
    single-value calls and one field-value batch per GPU, once every field has been found."""
    collector, _ = collect(nvml)
    for mock_function in nvml.mocks.values():
        mock_function.reset_mock()
    for second in range(20):
        collector.sample(T0 + 2 + second)

    calls_per_sample = sum(m.call_count for m in nvml.mocks.values()) / 20
    assert calls_per_sample == 8 * (8 + 1)
