"""Test doubles for the hardware the agent reads: an NVML whose functions are patched into pynvml
(with autospec, so a call with the wrong arguments fails like the real binding would) and a fake
/sys/class/infiniband tree."""

import ctypes
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml

MIB = 1024 * 1024
ALL_LINKS = 0xFFFFFFFF
CORRECTED, UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE, AGGREGATE = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC

# Every pynvml function the fake answers (and so every one the collector may call).
DISCOVERY_FUNCTIONS = (
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetTemperatureThreshold",
)
SAMPLE_FUNCTIONS = (
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetPcieThroughput",
)
SYSTEM_FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)


def address(index: int) -> int:
    """Where a fake GPU's handle points: any distinct non-null address will do."""
    return 0x10000 + 0x100 * index


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml maps the code to its subclass (NVMLError_NotSupported, ...)


@dataclass
class FakeGpu:
    """An HGX H100 SXM GPU as NVML shows it; every value distinct so a mix-up shows."""

    index: int
    uuid: str = ""
    name: str = "NVIDIA H100 80GB HBM3"
    serial: str = ""
    bus_id: str = ""
    memory_total: int = 81559 * MIB
    memory_used: int = 71234 * MIB
    power_limit_mw: int = 700_000
    enforced_limit_mw: int = 690_000
    power_mw: int = 612_345
    temperature: int = 64
    thresholds: dict[int, int] = field(  # nvmlDeviceGetTemperatureThreshold's, by threshold type
        default_factory=lambda: {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: 92,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: 87,
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: 85,
        }
    )
    util_gpu: int = 87
    util_mem: int = 45
    sm_clock: int = 1980
    mem_clock: int = 2619
    clock_reasons: int = 0x4  # SW power cap
    ecc: dict[tuple[int, int], int] = field(
        default_factory=lambda: {
            (CORRECTED, VOLATILE): 3,
            (UNCORRECTED, VOLATILE): 1,
            (CORRECTED, AGGREGATE): 17,
            (UNCORRECTED, AGGREGATE): 2,
        }
    )
    retired_pending: int = 0
    remapped: tuple[int, int, int, int] = (4, 1, 1, 0)  # correctable, uncorrectable, pending, failed
    pcie_replay: int = 5
    nvlink_errors: dict[int, int] = field(  # per link, per counter
        default_factory=lambda: {
            pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 2,
            pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 1,
            pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: 0,
        }
    )
    link_count: int = 18
    inactive_links: frozenset[int] = frozenset({3})
    nvlink_tx_kib: int = 10_000_000  # per link, cumulative
    nvlink_rx_kib: int = 20_000_000
    pcie_tx_bytes: int = 5_000_000_000
    pcie_rx_bytes: int = 7_000_000_000
    pcie_tx_kbps: int = 1_234_000  # what nvmlDeviceGetPcieThroughput measures
    pcie_rx_kbps: int = 2_345_000
    recovery_action: int = 0
    lost: bool = False
    all_links_scope: bool = True  # False: a driver that refuses scopeId UINT_MAX
    unsupported: set[Any] = field(default_factory=set)  # function names, or (name, *args) tuples
    failing: dict[Any, int] = field(default_factory=dict)  # the same keys → NVML error code
    field_status: dict[int, int] = field(default_factory=dict)  # field id → nvmlReturn
    read_at_us: int = 0  # the timestamp NVML gives a field value; 0, as many drivers give, for none

    def __post_init__(self) -> None:
        self.uuid = self.uuid or f"GPU-{self.index:08x}-1111-2222-3333-4444{self.index:08x}"
        self.serial = self.serial or f"16549220407{self.index:02d}"
        hgx_buses = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
        self.bus_id = self.bus_id or f"00000000:{hgx_buses[self.index % 8].upper()}:00.0"

    @property
    def active_links(self) -> list[int]:
        return [link for link in range(self.link_count) if link not in self.inactive_links]

    def advance(self, seconds: float) -> None:
        """Traffic for ``seconds``: 100 GB/s of NVLink and 10 GB/s of PCIe each way."""
        self.nvlink_tx_kib += int(100e9 * seconds / 1024 / len(self.active_links))
        self.nvlink_rx_kib += int(50e9 * seconds / 1024 / len(self.active_links))
        self.pcie_tx_bytes += int(10e9 * seconds)
        self.pcie_rx_bytes += int(20e9 * seconds)

    def field_value(self, field_id: int, scope: int) -> int | None:
        p = pynvml
        links = self.active_links if scope == ALL_LINKS else [scope]
        per_link = {
            p.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: self.nvlink_tx_kib,
            p.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: self.nvlink_rx_kib,
        }
        if field_id in per_link:
            return per_link[field_id] * len(links)
        values = {
            p.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: self.ecc[(CORRECTED, VOLATILE)],
            p.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: self.ecc[(UNCORRECTED, VOLATILE)],
            p.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: self.ecc[(CORRECTED, AGGREGATE)],
            p.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: self.ecc[(UNCORRECTED, AGGREGATE)],
            p.NVML_FI_DEV_RETIRED_PENDING: self.retired_pending,
            p.NVML_FI_DEV_REMAPPED_COR: self.remapped[0],
            p.NVML_FI_DEV_REMAPPED_UNC: self.remapped[1],
            p.NVML_FI_DEV_REMAPPED_PENDING: self.remapped[2],
            p.NVML_FI_DEV_REMAPPED_FAILURE: self.remapped[3],
            p.NVML_FI_DEV_PCIE_REPLAY_COUNTER: self.pcie_replay,
            p.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: self.nvlink_total(p.NVML_NVLINK_ERROR_DL_CRC_FLIT),
            p.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: self.nvlink_total(p.NVML_NVLINK_ERROR_DL_REPLAY),
            p.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: self.nvlink_total(p.NVML_NVLINK_ERROR_DL_RECOVERY),
            p.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: self.pcie_tx_bytes,
            p.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: self.pcie_rx_bytes,
            p.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: self.recovery_action,
        }
        return values.get(field_id)

    def nvlink_total(self, counter: int) -> int:
        return self.nvlink_errors[counter] * len(self.active_links)


class FakeNvml:
    """The NVML library of one node. Use ``patched()`` to install it into pynvml."""

    def __init__(self, gpus: list[FakeGpu] | None = None) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu(index) for index in range(8)]
        self.handles = [ctypes.cast(ctypes.c_void_p(address(gpu.index)), pynvml.c_nvmlDevice_t) for gpu in self.gpus]
        self.by_address = {address(gpu.index): gpu for gpu in self.gpus}
        self.events: deque[tuple[int, int]] = deque()  # (gpu index, xid)
        self.init_error: int | None = None
        self.unsupported: set[str] = set()  # system (not per-GPU) functions that answer NOT_SUPPORTED
        self.registered: list[int] = []

    @contextmanager
    def patched(self) -> Iterator[dict[str, mock.MagicMock]]:
        with ExitStack() as stack:
            mocks = {
                name: stack.enter_context(
                    mock.patch.object(pynvml, name, autospec=True, side_effect=getattr(self, name))
                )
                for name in (*SYSTEM_FUNCTIONS, *DISCOVERY_FUNCTIONS, *SAMPLE_FUNCTIONS)
            }
            yield mocks

    def gpu(self, handle: Any, function: str, *args: Any) -> FakeGpu:
        gpu = self.by_address[ctypes.cast(handle, ctypes.c_void_p).value]
        if gpu.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        for key in (function, (function, *args)):
            if key in gpu.unsupported:
                raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if key in gpu.failing:
                raise nvml_error(gpu.failing[key])
        return gpu

    # System
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise nvml_error(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return self.handles[index]

    def system(self, function: str) -> None:
        if function in self.unsupported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlSystemGetDriverVersion(self) -> str:
        self.system("nvmlSystemGetDriverVersion")
        return "550.90.07"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self.system("nvmlSystemGetCudaDriverVersion")
        return 12040

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self.system("nvmlSystemGetCudaDriverVersion_v2")
        return 12040

    # Discovery
    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self.gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self.gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        return self.gpu(handle, "nvmlDeviceGetSerial").serial

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self.gpu(handle, "nvmlDeviceGetPciInfo").bus_id.encode()
        return info

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return self.gpu(handle, "nvmlDeviceGetPowerManagementLimit").power_limit_mw

    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:
        gpu = self.gpu(handle, "nvmlDeviceGetTemperatureThreshold", threshold)
        if threshold not in gpu.thresholds:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.thresholds[threshold]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        self.gpu(handle, "nvmlDeviceGetMaxPcieLinkGeneration")
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        self.gpu(handle, "nvmlDeviceGetMaxPcieLinkWidth")
        return 16

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        self.gpu(handle, "nvmlDeviceGetCurrPcieLinkWidth")
        return 8

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        gpu = self.gpu(device, "nvmlDeviceGetNvLinkState")
        if link >= gpu.link_count:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_DISABLED if link in gpu.inactive_links else pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> Any:
        self.gpu(device, "nvmlDeviceGetNvLinkRemotePciInfo")
        info = pynvml.nvmlPciInfo_t()
        info.busId = f"00000000:{5 + link % 4:02X}:00.0".encode()  # the four NVSwitches of an HGX H100
        return info

    # Sampling
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self.gpu(handle, "nvmlDeviceGetUtilizationRates")
        return pynvml.c_nvmlUtilization_t(gpu=gpu.util_gpu, memory=gpu.util_mem)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        gpu = self.gpu(handle, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=gpu.memory_total, used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return self.gpu(handle, "nvmlDeviceGetTemperature", sensor).temperature

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self.gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self.gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").enforced_limit_mw

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        gpu = self.gpu(handle, "nvmlDeviceGetClockInfo", type)
        return {pynvml.NVML_CLOCK_SM: gpu.sm_clock, pynvml.NVML_CLOCK_MEM: gpu.mem_clock}[type]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self.gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self.gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").clock_reasons

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list) -> Any:
        gpu = self.gpu(handle, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for slot, requested in zip(values, fieldIds, strict=True):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            slot.fieldId, slot.scopeId = field_id, scope
            value = gpu.field_value(field_id, scope)
            status = gpu.field_status.get(field_id, pynvml.NVML_SUCCESS if value is not None else 3)
            if scope == ALL_LINKS and not gpu.all_links_scope:
                status = pynvml.NVML_ERROR_INVALID_ARGUMENT
            slot.nvmlReturn = status
            slot.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            slot.timestamp = gpu.read_at_us
            slot.value.ullVal = value or 0
        return values

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        return self.gpu(handle, "nvmlDeviceGetTotalEccErrors", errorType, counterType).ecc[(errorType, counterType)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        return self.gpu(device, "nvmlDeviceGetRetiredPagesPendingStatus").retired_pending

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        return self.gpu(device, "nvmlDeviceGetRemappedRows").remapped

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return self.gpu(handle, "nvmlDeviceGetPcieReplayCounter").pcie_replay

    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int:
        return self.gpu(device, "nvmlDeviceGetNvLinkErrorCounter", counter).nvlink_errors[counter]

    def nvmlDeviceGetPcieThroughput(self, device: Any, counter: int) -> int:
        gpu = self.gpu(device, "nvmlDeviceGetPcieThroughput", counter)
        return gpu.pcie_tx_kbps if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kbps

    # Events
    def nvmlEventSetCreate(self) -> Any:
        self.system("nvmlEventSetCreate")
        return pynvml.c_nvmlEventSet_t()

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        self.registered.append(self.gpu(handle, "nvmlDeviceRegisterEvents").index)

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any:
        if not self.events:
            raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.events.popleft()
        data = pynvml.c_nvmlEventData_t()
        data.device = self.handles[index]
        data.eventType = pynvml.nvmlEventTypeXidCriticalError
        data.eventData = xid
        return data

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        pass


# InfiniBand sysfs -------------------------------------------------------------------------------


def write_port(
    root: Path,
    device: str,
    port: int = 1,
    *,
    rate: str = "400 Gb/sec (4X NDR)",
    state: str = "4: ACTIVE",
    phys_state: str = "5: LinkUp",
    link_layer: str = "InfiniBand",
    node_guid: str = "b859:9f03:00d4:2e3a",
    gid: str | None = "fe80:0000:0000:0000:b859:9f03:00d4:2e3b",
    counters: dict[str, str | int] | None = None,
) -> Path:
    """One port of a fake /sys/class/infiniband tree; ``counters=None`` leaves out the counters dir."""
    device_dir = root / device
    port_dir = device_dir / "ports" / str(port)
    port_dir.mkdir(parents=True, exist_ok=True)
    (device_dir / "node_guid").write_text(node_guid + "\n")
    for name, text in (("rate", rate), ("state", state), ("phys_state", phys_state), ("link_layer", link_layer)):
        (port_dir / name).write_text(text + "\n")
    if gid is not None:
        (port_dir / "gids").mkdir(exist_ok=True)
        (port_dir / "gids" / "0").write_text(gid + "\n")
    if counters is not None:
        set_counters(port_dir, **counters)
    return port_dir


def set_counters(port_dir: Path, **counters: str | int) -> None:
    (port_dir / "counters").mkdir(exist_ok=True)
    for name, value in counters.items():
        (port_dir / "counters" / name).write_text(f"{value}\n")
