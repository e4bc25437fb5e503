"""The real NVML collector against a fake NVML patched into pynvml (autospec): field mapping, a
NOT_SUPPORTED answer from every function it calls, lost GPUs, XID events, and the cost of a sample."""

import logging

import pynvml
import pytest

from agents.collectors.nvml import NvmlCollector, NvmlUnavailable
from agents.protocol import GpuSample, Inventory, Telemetry, decode_agent_message, encode
from tests.agents.fakes import AGGREGATE, CORRECTED, UNCORRECTED, VOLATILE, FakeGpu, FakeNvml

T0 = 1_750_000_000.0
ALL_FIELDS = frozenset(GpuSample.__struct_fields__) - {"index"}
NO_BATCH = "nvmlDeviceGetFieldValues"  # unsupported: every batched field comes from its fallback
BATCH_ONLY = frozenset({"nvlink_tx_kbps", "nvlink_rx_kbps", "recovery_action"})  # no other source
ECC_FIELDS = {
    (CORRECTED, VOLATILE): "ecc_corrected_volatile",
    (UNCORRECTED, VOLATILE): "ecc_uncorrected_volatile",
    (CORRECTED, AGGREGATE): "ecc_corrected_aggregate",
    (UNCORRECTED, AGGREGATE): "ecc_uncorrected_aggregate",
}
REMAPPED_FIELDS = {
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "remapped_rows_pending",
    "remapped_rows_failed",
}
P = pynvml


@pytest.fixture
def nvml():
    fake = FakeNvml()
    with fake.patched() as mocks:
        fake.mocks = mocks
        yield fake


def collect(fake: FakeNvml, samples: int = 2) -> tuple[NvmlCollector, list]:
    """Samples one second apart with traffic in between, so the counter rates exist."""
    collector = NvmlCollector(hostname="gpu-001")
    taken = []
    for second in range(samples):
        if second:
            for gpu in fake.gpus:
                gpu.advance(1.0)
        taken.append(collector.sample(T0 + second))
    return collector, taken


def present(sample: GpuSample) -> set[str]:
    return {name for name in ALL_FIELDS if getattr(sample, name) is not None}


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


# NOT_SUPPORTED from every function -------------------------------------------------------------

# (what is unsupported, on top of a base setting) -> the fields that must then be absent
DIRECT_CASES = [
    ({"nvmlDeviceGetUtilizationRates"}, {"util_gpu", "util_mem"}),
    ({"nvmlDeviceGetMemoryInfo"}, {"mem_used_mib"}),
    ({"nvmlDeviceGetTemperature"}, {"temp_c"}),
    ({"nvmlDeviceGetPowerUsage"}, {"power_w"}),
    ({"nvmlDeviceGetEnforcedPowerLimit"}, {"power_limit_w"}),
    ({("nvmlDeviceGetClockInfo", P.NVML_CLOCK_SM)}, {"sm_clock_mhz"}),
    ({("nvmlDeviceGetClockInfo", P.NVML_CLOCK_MEM)}, {"mem_clock_mhz"}),
    ({"nvmlDeviceGetClockInfo"}, {"sm_clock_mhz", "mem_clock_mhz"}),
    (
        {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
        {"throttle_reasons"},
    ),
    ({"nvmlDeviceGetFieldValues"}, BATCH_ONLY),  # the rest comes from the fallbacks
]
FALLBACK_CASES = [  # with the field-value batch unsupported, each fallback failing in turn
    ({"nvmlDeviceGetTotalEccErrors"}, set(ECC_FIELDS.values())),
    *(({("nvmlDeviceGetTotalEccErrors", *key)}, {name}) for key, name in ECC_FIELDS.items()),
    ({"nvmlDeviceGetRetiredPagesPendingStatus"}, {"retired_pages_pending"}),
    ({"nvmlDeviceGetRemappedRows"}, REMAPPED_FIELDS),
    ({"nvmlDeviceGetPcieReplayCounter"}, {"pcie_replay_count"}),
    ({("nvmlDeviceGetNvLinkErrorCounter", P.NVML_NVLINK_ERROR_DL_CRC_FLIT)}, {"nvlink_crc_errors"}),
    ({("nvmlDeviceGetNvLinkErrorCounter", P.NVML_NVLINK_ERROR_DL_REPLAY)}, {"nvlink_replay_errors"}),
    ({("nvmlDeviceGetNvLinkErrorCounter", P.NVML_NVLINK_ERROR_DL_RECOVERY)}, {"nvlink_recovery_errors"}),
    ({("nvmlDeviceGetPcieThroughput", P.NVML_PCIE_UTIL_TX_BYTES)}, {"pcie_tx_kbps"}),
    ({("nvmlDeviceGetPcieThroughput", P.NVML_PCIE_UTIL_RX_BYTES)}, {"pcie_rx_kbps"}),
]


def case_id(case: tuple) -> str:
    return "+".join(key if isinstance(key, str) else "/".join(map(str, key)) for key in sorted(case[0], key=str))


@pytest.mark.parametrize(
    ("unsupported", "absent"),
    DIRECT_CASES + [({NO_BATCH, *keys}, BATCH_ONLY | fields) for keys, fields in FALLBACK_CASES],
    ids=[case_id(case) for case in DIRECT_CASES] + [f"fallback:{case_id(case)}" for case in FALLBACK_CASES],
)
def test_it_reports_a_field_nvml_does_not_support_as_absent_and_keeps_the_rest(unsupported, absent):
    fake = FakeNvml([FakeGpu(0, unsupported=set(unsupported)), FakeGpu(1)])
    with fake.patched():
        _, (_, second) = collect(fake)

    affected, healthy = second.gpus
    assert ALL_FIELDS - present(affected) == absent
    assert present(healthy) == ALL_FIELDS


BATCHED_FIELD_IDS = {
    "ecc_corrected_volatile": (P.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, {("nvmlDeviceGetTotalEccErrors", CORRECTED, VOLATILE)}),
    "ecc_uncorrected_volatile": (
        P.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
        {("nvmlDeviceGetTotalEccErrors", UNCORRECTED, VOLATILE)},
    ),
    "ecc_corrected_aggregate": (
        P.NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
        {("nvmlDeviceGetTotalEccErrors", CORRECTED, AGGREGATE)},
    ),
    "ecc_uncorrected_aggregate": (
        P.NVML_FI_DEV_ECC_DBE_AGG_TOTAL,
        {("nvmlDeviceGetTotalEccErrors", UNCORRECTED, AGGREGATE)},
    ),
    "retired_pages_pending": (P.NVML_FI_DEV_RETIRED_PENDING, {"nvmlDeviceGetRetiredPagesPendingStatus"}),
    "remapped_rows_correctable": (P.NVML_FI_DEV_REMAPPED_COR, {"nvmlDeviceGetRemappedRows"}),
    "remapped_rows_uncorrectable": (P.NVML_FI_DEV_REMAPPED_UNC, {"nvmlDeviceGetRemappedRows"}),
    "remapped_rows_pending": (P.NVML_FI_DEV_REMAPPED_PENDING, {"nvmlDeviceGetRemappedRows"}),
    "remapped_rows_failed": (P.NVML_FI_DEV_REMAPPED_FAILURE, {"nvmlDeviceGetRemappedRows"}),
    "pcie_replay_count": (P.NVML_FI_DEV_PCIE_REPLAY_COUNTER, {"nvmlDeviceGetPcieReplayCounter"}),
    "nvlink_crc_errors": (P.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, {"nvmlDeviceGetNvLinkErrorCounter"}),
    "nvlink_replay_errors": (P.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, {"nvmlDeviceGetNvLinkErrorCounter"}),
    "nvlink_recovery_errors": (
        P.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
        {"nvmlDeviceGetNvLinkErrorCounter"},
    ),
    "pcie_tx_kbps": (P.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, {"nvmlDeviceGetPcieThroughput"}),
    "pcie_rx_kbps": (P.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, {"nvmlDeviceGetPcieThroughput"}),
    "recovery_action": (P.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, set()),
}


@pytest.mark.parametrize("name", sorted(BATCHED_FIELD_IDS))
def test_it_reports_a_batched_field_absent_when_neither_the_batch_nor_its_fallback_has_it(name):
    field_id, fallback = BATCHED_FIELD_IDS[name]
    gpu = FakeGpu(0, unsupported=set(fallback), field_status={field_id: pynvml.NVML_ERROR_NOT_SUPPORTED})
    fake = FakeNvml([gpu])
    with fake.patched():
        _, (_, second) = collect(fake)

    assert ALL_FIELDS - present(second.gpus[0]) == {name}


@pytest.mark.parametrize("name", sorted(name for name, (_, fallback) in BATCHED_FIELD_IDS.items() if fallback))
def test_it_reads_a_field_the_batch_cannot_give_from_its_dedicated_function(name):
    field_id, _ = BATCHED_FIELD_IDS[name]
    reference = FakeNvml()
    with reference.patched():
        _, (_, expected) = collect(reference)
    fake = FakeNvml()
    for gpu in fake.gpus:
        gpu.field_status = {field_id: pynvml.NVML_ERROR_NOT_SUPPORTED}
    with fake.patched():
        _, (_, second) = collect(fake)

    if name in ("pcie_tx_kbps", "pcie_rx_kbps"):  # the fallback measures throughput itself
        assert getattr(second.gpus[0], name) == {"pcie_tx_kbps": 1_234_000, "pcie_rx_kbps": 2_345_000}[name]
    else:
        assert second == expected


def test_it_sums_nvlink_throughput_per_link_when_the_driver_refuses_the_all_links_scope():
    fake = FakeNvml([FakeGpu(0, all_links_scope=False)])
    with fake.patched():
        _, (_, second) = collect(fake)

    assert second.gpus[0].nvlink_tx_kbps == pytest.approx(100_000_000, rel=1e-6)
    assert second.gpus[0].nvlink_rx_kbps == pytest.approx(50_000_000, rel=1e-6)


def test_it_asks_the_old_throttle_reasons_function_when_the_driver_lacks_the_new_one():
    gpu = FakeGpu(0, failing={"nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})
    fake = FakeNvml([gpu])
    with fake.patched() as mocks:
        _, (first, second) = collect(fake)

        assert first.gpus[0].throttle_reasons == second.gpus[0].throttle_reasons == 0x4
        assert mocks["nvmlDeviceGetCurrentClocksEventReasons"].call_count == 1
        assert mocks["nvmlDeviceGetCurrentClocksThrottleReasons"].call_count == 2


@pytest.mark.parametrize(
    "code",
    [
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NOT_FOUND,
    ],
)
def test_it_does_not_ask_again_for_a_field_the_gpu_has_shown_it_lacks(code):
    gpu = FakeGpu(0, failing={"nvmlDeviceGetTemperature": code})
    gpu.field_status = {P.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: code}
    fake = FakeNvml([gpu])
    with fake.patched() as mocks:
        _, samples = collect(fake, samples=5)

        assert mocks["nvmlDeviceGetTemperature"].call_count == 1
        batches = [call.args[1] for call in mocks["nvmlDeviceGetFieldValues"].call_args_list]
        assert (P.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 0) in batches[0]
        assert all((P.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 0) not in batch for batch in batches[1:])
        assert mocks["nvmlDeviceGetTotalEccErrors"].call_count == 5  # the fallback, once per sample
    assert all(sample.gpus[0].temp_c is None for sample in samples)
    assert all(sample.gpus[0].ecc_corrected_volatile == 3 for sample in samples)


def test_it_asks_again_after_a_passing_error(caplog):
    gpu = FakeGpu(0, failing={"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_UNKNOWN})
    fake = FakeNvml([gpu])
    with fake.patched():
        collector = NvmlCollector(hostname="gpu-001")
        with caplog.at_level(logging.DEBUG, logger="agents.collectors.nvml_readers"):
            during = collector.sample(T0)
        gpu.failing.clear()
        after = collector.sample(T0 + 1)

    assert during.gpus[0].temp_c is None
    assert after.gpus[0].temp_c == 64.0
    assert "nvmlDeviceGetTemperature failed this sample" in caplog.text


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
