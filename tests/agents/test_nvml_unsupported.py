"""The real NVML collector against a fake NVML patched into pynvml (autospec): a NOT_SUPPORTED answer
from every function it calls leaves that field out and keeps the rest; fallbacks for the field-value
batch; what it asks again and what it stops asking."""

import logging

import pynvml
import pytest

from agents.collectors.nvml import NvmlCollector
from tests.agents.fakes import AGGREGATE, CORRECTED, UNCORRECTED, VOLATILE, FakeGpu, FakeNvml
from tests.agents.nvml_sampling import ALL_FIELDS, T0, collect, present

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
