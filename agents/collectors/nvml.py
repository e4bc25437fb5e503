"""The real GPU collector, through NVML (``pynvml`` from the ``nvidia-ml-py`` package).

Every field is read on its own and guarded on its own: a GPU that does not support a field (NVML
answers NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND, NOT_FOUND, ...) reports it as absent, never
as zero, and the rest of its sample comes back. Such an answer does not change by asking again, so
the GPU remembers it and the 1 s loop stops paying for the failing call. Other errors (a timeout,
UNKNOWN) leave the field absent for that sample only. A GPU that answers GPU_IS_LOST has fallen off
the bus: the collector reports an XID 79 event, and the GPU leaves the samples and the inventory.

What one sample costs: eight single-value calls per GPU (utilization, memory, temperature, power,
enforced power limit, two clocks, clock event reasons) and one ``nvmlDeviceGetFieldValues`` batch
that carries the ECC totals, retired-page and row-remapping state, the PCIe replay counter, the
NVLink error totals (which NVML sums over the links), the NVLink and PCIe byte counters and the
recovery action: nine calls per GPU instead of about seventy (the NVLink error counters alone are
three per link, eighteen links on a Hopper GPU). A field the batch cannot give falls back to its
dedicated function (``nvmlDeviceGetTotalEccErrors``, ``nvmlDeviceGetRemappedRows``, the per-link
``nvmlDeviceGetNvLinkErrorCounter`` summed over active links, ...). The PCIe throughput fallback,
``nvmlDeviceGetPcieThroughput``, measures over 20 ms inside the driver on every call, which is why
it is only the fallback for the byte counters.
"""

import ctypes
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pynvml

from agents.collectors.hostfacts import read_host_facts, short_text, valid_hostname
from agents.protocol import (
    MAX_EVENTS_PER_FRAME,
    GpuEvent,
    GpuInfo,
    GpuSample,
    Inventory,
    NodeSample,
    NvLinkPeer,
    Range,
    field_ranges,
)

log = logging.getLogger(__name__)

MIB: Final = 1024 * 1024
XID_FALLEN_OFF_THE_BUS: Final = 79
_ALL_LINKS: Final = 0xFFFFFFFF  # scopeId UINT_MAX: "aggregate value summed up across all links" (nvml.h)

# Answers that asking again will not change: the field is absent on this GPU.
_ABSENT_CODES: Final = frozenset(
    getattr(pynvml, name)
    for name in (
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_NO_PERMISSION",
        "NVML_ERROR_FUNCTION_NOT_FOUND",
        "NVML_ERROR_NOT_FOUND",
        "NVML_ERROR_INVALID_ARGUMENT",
        "NVML_ERROR_DEPRECATED",
    )
    if hasattr(pynvml, name)
)
_GPU_IS_LOST: Final = pynvml.NVML_ERROR_GPU_IS_LOST

# The clocks-event-reasons function was called "throttle reasons" before driver 535.
_CLOCK_EVENT_REASONS: Final = (
    "nvmlDeviceGetCurrentClocksEventReasons"
    if hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")
    else "nvmlDeviceGetCurrentClocksThrottleReasons"
)


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or initialised (no driver, no GPU, a driver/library mismatch)."""


class _Unsupported(Exception):
    """A reader's field cannot exist on this GPU (for example NVLink counters on a GPU without NVLink)."""


class _GpuLost(Exception):
    pass


# Readers: one NVML call each, filling one or more GpuSample fields ------------------------------


@dataclass(frozen=True, eq=False)
class _Reader:
    function: str  # the NVML function it calls, for the log
    fields: tuple[str, ...]  # the GpuSample fields it fills
    read: Callable[["_Gpu", dict[str, Any]], None]
    fallback: "_Reader | None" = None  # what to ask instead once this is known to be absent


def _reader(function: str, *fields: str, fallback: _Reader | None = None) -> Callable:
    def wrap(read: Callable[["_Gpu", dict[str, Any]], None]) -> _Reader:
        return _Reader(function, fields, read, fallback)

    return wrap


@_reader("nvmlDeviceGetUtilizationRates", "util_gpu", "util_mem")
def _utilization(gpu: "_Gpu", out: dict[str, Any]) -> None:
    rates = pynvml.nvmlDeviceGetUtilizationRates(gpu.handle)
    out["util_gpu"] = float(rates.gpu)
    out["util_mem"] = float(rates.memory)


@_reader("nvmlDeviceGetMemoryInfo", "mem_used_mib")
def _memory_used(gpu: "_Gpu", out: dict[str, Any]) -> None:
    out["mem_used_mib"] = pynvml.nvmlDeviceGetMemoryInfo(gpu.handle).used // MIB


@_reader("nvmlDeviceGetTemperature", "temp_c")
def _temperature(gpu: "_Gpu", out: dict[str, Any]) -> None:
    out["temp_c"] = float(pynvml.nvmlDeviceGetTemperature(gpu.handle, pynvml.NVML_TEMPERATURE_GPU))


@_reader("nvmlDeviceGetPowerUsage", "power_w")
def _power(gpu: "_Gpu", out: dict[str, Any]) -> None:
    out["power_w"] = pynvml.nvmlDeviceGetPowerUsage(gpu.handle) / 1000  # milliwatts


@_reader("nvmlDeviceGetEnforcedPowerLimit", "power_limit_w")
def _power_limit(gpu: "_Gpu", out: dict[str, Any]) -> None:
    out["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(gpu.handle) / 1000


@_reader("nvmlDeviceGetClockInfo", "sm_clock_mhz")
def _sm_clock(gpu: "_Gpu", out: dict[str, Any]) -> None:
    out["sm_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(gpu.handle, pynvml.NVML_CLOCK_SM)


@_reader("nvmlDeviceGetClockInfo", "mem_clock_mhz")
def _mem_clock(gpu: "_Gpu", out: dict[str, Any]) -> None:
    out["mem_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(gpu.handle, pynvml.NVML_CLOCK_MEM)


@_reader("nvmlDeviceGetCurrentClocksThrottleReasons", "throttle_reasons")
def _throttle_reasons(gpu: "_Gpu", out: dict[str, Any]) -> None:
    out["throttle_reasons"] = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(gpu.handle)


@_reader(_CLOCK_EVENT_REASONS, "throttle_reasons", fallback=_throttle_reasons)
def _clock_event_reasons(gpu: "_Gpu", out: dict[str, Any]) -> None:
    # A binding newer than the driver knows the new name while the library lacks the symbol
    # (FUNCTION_NOT_FOUND): the fallback asks under the old name.
    out["throttle_reasons"] = getattr(pynvml, _CLOCK_EVENT_REASONS)(gpu.handle)


def _total_ecc(field: str, error_type: int, counter_type: int) -> _Reader:
    def read(gpu: "_Gpu", out: dict[str, Any]) -> None:
        out[field] = pynvml.nvmlDeviceGetTotalEccErrors(gpu.handle, error_type, counter_type)

    return _Reader("nvmlDeviceGetTotalEccErrors", (field,), read)


@_reader("nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending")
def _retired_pages_pending(gpu: "_Gpu", out: dict[str, Any]) -> None:
    out["retired_pages_pending"] = pynvml.nvmlDeviceGetRetiredPagesPendingStatus(gpu.handle) != 0


@_reader(
    "nvmlDeviceGetRemappedRows",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "remapped_rows_pending",
    "remapped_rows_failed",
)
def _remapped_rows(gpu: "_Gpu", out: dict[str, Any]) -> None:
    correctable, uncorrectable, pending, failed = pynvml.nvmlDeviceGetRemappedRows(gpu.handle)
    out["remapped_rows_correctable"] = correctable
    out["remapped_rows_uncorrectable"] = uncorrectable
    out["remapped_rows_pending"] = pending != 0
    out["remapped_rows_failed"] = failed != 0


@_reader("nvmlDeviceGetPcieReplayCounter", "pcie_replay_count")
def _pcie_replay(gpu: "_Gpu", out: dict[str, Any]) -> None:
    out["pcie_replay_count"] = pynvml.nvmlDeviceGetPcieReplayCounter(gpu.handle)


def _nvlink_error_sum(field: str, counter: int) -> _Reader:
    def read(gpu: "_Gpu", out: dict[str, Any]) -> None:
        if not gpu.active_links:
            raise _Unsupported
        out[field] = sum(pynvml.nvmlDeviceGetNvLinkErrorCounter(gpu.handle, link, counter) for link in gpu.active_links)

    return _Reader("nvmlDeviceGetNvLinkErrorCounter", (field,), read)


def _pcie_throughput(field: str, counter: int) -> _Reader:
    def read(gpu: "_Gpu", out: dict[str, Any]) -> None:
        out[field] = pynvml.nvmlDeviceGetPcieThroughput(gpu.handle, counter)  # KB/s over the driver's 20 ms

    return _Reader("nvmlDeviceGetPcieThroughput", (field,), read)


@_reader("nvmlDeviceGetFieldValues", "nvlink_tx_kbps", "nvlink_rx_kbps")
def _nvlink_throughput_per_link(gpu: "_Gpu", out: dict[str, Any]) -> None:
    """For a driver that refuses the all-links scope: one batch of per-link counters, summed."""
    links = gpu.active_links
    if not links:
        raise _Unsupported
    ids = [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link) for link in links]
    ids += [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link) for link in links]
    values = pynvml.nvmlDeviceGetFieldValues(gpu.handle, ids)
    for value in values:
        if value.nvmlReturn != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(value.nvmlReturn)
    stamp = max(value.timestamp for value in values)
    half = len(links)
    out["nvlink_tx_kbps"] = _kib_rate(gpu, "nvlink_tx_kbps", sum(_field_value(v) for v in values[:half]), stamp)
    out["nvlink_rx_kbps"] = _kib_rate(gpu, "nvlink_rx_kbps", sum(_field_value(v) for v in values[half:]), stamp)


# The field-value batch -------------------------------------------------------------------------

_VALUE_MEMBERS: Final = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    getattr(pynvml, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6): "usVal",
}


def _field_value(value: Any) -> int | float:
    return getattr(value.value, _VALUE_MEMBERS.get(value.valueType, "ullVal"))


def _as_count(gpu: "_Gpu", name: str, raw: float, stamp: int) -> int:
    return int(raw)


def _as_flag(gpu: "_Gpu", name: str, raw: float, stamp: int) -> bool:
    return raw != 0


def _kib_rate(gpu: "_Gpu", name: str, raw: float, stamp: int) -> int | None:
    per_second = gpu.rate(name, raw, stamp)
    return None if per_second is None else int(per_second * 1024 / 1000)  # KiB/s to kB/s


def _byte_rate(gpu: "_Gpu", name: str, raw: float, stamp: int) -> int | None:
    per_second = gpu.rate(name, raw, stamp)
    return None if per_second is None else int(per_second / 1000)


@dataclass(frozen=True, eq=False)
class _Field:
    field_id: int
    scope: int
    name: str  # the GpuSample field
    convert: Callable[["_Gpu", str, float, int], Any]  # (gpu, name, raw value, timestamp in µs)
    fallback: _Reader | None = None


def _batched_fields() -> tuple[_Field, ...]:
    p = pynvml
    corrected, uncorrected = p.NVML_MEMORY_ERROR_TYPE_CORRECTED, p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    ecc = (  # single-bit = corrected, double-bit = uncorrected
        ("ecc_corrected_volatile", p.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, corrected, p.NVML_VOLATILE_ECC),
        ("ecc_uncorrected_volatile", p.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, uncorrected, p.NVML_VOLATILE_ECC),
        ("ecc_corrected_aggregate", p.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, corrected, p.NVML_AGGREGATE_ECC),
        ("ecc_uncorrected_aggregate", p.NVML_FI_DEV_ECC_DBE_AGG_TOTAL, uncorrected, p.NVML_AGGREGATE_ECC),
    )
    nvlink_errors = (
        ("nvlink_crc_errors", p.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, p.NVML_NVLINK_ERROR_DL_CRC_FLIT),
        ("nvlink_replay_errors", p.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, p.NVML_NVLINK_ERROR_DL_REPLAY),
        ("nvlink_recovery_errors", p.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, p.NVML_NVLINK_ERROR_DL_RECOVERY),
    )
    pcie_bytes = (
        ("pcie_tx_kbps", p.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, p.NVML_PCIE_UTIL_TX_BYTES),
        ("pcie_rx_kbps", p.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, p.NVML_PCIE_UTIL_RX_BYTES),
    )
    remapped = (
        ("remapped_rows_correctable", p.NVML_FI_DEV_REMAPPED_COR, _as_count),
        ("remapped_rows_uncorrectable", p.NVML_FI_DEV_REMAPPED_UNC, _as_count),
        ("remapped_rows_pending", p.NVML_FI_DEV_REMAPPED_PENDING, _as_flag),
        ("remapped_rows_failed", p.NVML_FI_DEV_REMAPPED_FAILURE, _as_flag),
    )
    nvlink_data = (
        ("nvlink_tx_kbps", p.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX),
        ("nvlink_rx_kbps", p.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX),
    )
    fields = [
        *(_Field(fid, 0, name, _as_count, _total_ecc(name, kind, counter)) for name, fid, kind, counter in ecc),
        _Field(p.NVML_FI_DEV_RETIRED_PENDING, 0, "retired_pages_pending", _as_flag, _retired_pages_pending),
        *(_Field(fid, 0, name, convert, _remapped_rows) for name, fid, convert in remapped),
        _Field(p.NVML_FI_DEV_PCIE_REPLAY_COUNTER, 0, "pcie_replay_count", _as_count, _pcie_replay),
        *(_Field(fid, 0, name, _as_count, _nvlink_error_sum(name, counter)) for name, fid, counter in nvlink_errors),
        *(_Field(fid, _ALL_LINKS, name, _kib_rate, _nvlink_throughput_per_link) for name, fid in nvlink_data),
        *(_Field(fid, 0, name, _byte_rate, _pcie_throughput(name, counter)) for name, fid, counter in pcie_bytes),
    ]
    recovery_action = getattr(p, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)  # drivers from R570
    if recovery_action is not None:
        fields.append(_Field(recovery_action, 0, "recovery_action", _as_count))
    return tuple(fields)


_BATCHED_FIELDS: Final = _batched_fields()


@_reader("nvmlDeviceGetFieldValues", *(field.name for field in _BATCHED_FIELDS))
def _field_batch(gpu: "_Gpu", out: dict[str, Any]) -> None:
    fields = tuple(gpu.fields)
    values = pynvml.nvmlDeviceGetFieldValues(gpu.handle, gpu.field_ids)
    for field, value in zip(fields, values, strict=True):
        code = value.nvmlReturn
        if code == pynvml.NVML_SUCCESS:
            out[field.name] = field.convert(gpu, field.name, _field_value(value), value.timestamp)
        elif code == _GPU_IS_LOST:
            raise pynvml.NVMLError(code)
        elif code in _ABSENT_CODES:
            gpu.drop_field(field, _error_name(code))
    if not gpu.fields:
        raise _Unsupported


# Readers every GPU starts with, in the order of a sample.
_READERS: Final = (
    _utilization,
    _memory_used,
    _temperature,
    _power,
    _power_limit,
    _sm_clock,
    _mem_clock,
    _clock_event_reasons,
    _field_batch,
)


def _error_name(code: int) -> str:
    return type(pynvml.NVMLError(code)).__name__


class _Gpu:
    """One GPU's handle and what it has shown it supports."""

    __slots__ = ("active_links", "counters", "field_ids", "fields", "handle", "index", "links", "now", "readers")

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle
        self.readers: list[_Reader] = list(_READERS)
        self.fields: list[_Field] = list(_BATCHED_FIELDS)
        self.field_ids = [(field.field_id, field.scope) for field in self.fields]
        self.links: tuple[int, ...] = tuple(range(pynvml.NVML_NVLINK_MAX_LINKS))  # narrowed by discovery
        self.active_links: tuple[int, ...] = ()
        self.counters: dict[str, tuple[float, float]] = {}
        self.now = 0.0

    def retire(self, position: int, reason: str) -> None:
        """The reader at ``position`` is absent on this GPU: its fallback (if new) takes its place."""
        reader = self.readers[position]
        if reader is _field_batch:  # each batched field falls back to its own function
            for field in list(self.fields):
                self.drop_field(field, reason)
        fallback = reader.fallback
        if fallback is None or fallback in self.readers:
            del self.readers[position]
            self._log_absent(reader.function, reader.fields, reason)
        else:
            self.readers[position] = fallback
            log.info("GPU %d: %s %s; asking %s instead.", self.index, reader.function, reason, fallback.function)

    def drop_field(self, field: _Field, reason: str) -> None:
        self.fields.remove(field)
        self.field_ids = [(f.field_id, f.scope) for f in self.fields]
        if field.fallback is not None and field.fallback not in self.readers:
            self.readers.append(field.fallback)  # reached later in the same sample's loop
        elif field.fallback is None:
            self._log_absent(f"field {field.field_id}", (field.name,), reason)

    def _log_absent(self, source: str, fields: tuple[str, ...], reason: str) -> None:
        log.info("GPU %d: %s %s; %s reported as absent.", self.index, source, reason, ", ".join(fields))

    def rate(self, name: str, counter: float, stamp_us: int) -> float | None:
        """Per-second rate of a cumulative counter since the last sample; None on the first sample or
        when the counter went backwards (a wrap or a driver reload)."""
        at = stamp_us / 1e6 if stamp_us > 0 else self.now
        previous = self.counters.get(name)
        self.counters[name] = (counter, at)
        if previous is None:
            return None
        delta, elapsed = counter - previous[0], at - previous[1]
        if delta < 0 or elapsed <= 0:
            return None
        return delta / elapsed


_SAMPLE_RANGES: Final = field_ranges(GpuSample)
_INFO_RANGES: Final = field_ranges(GpuInfo)


def _in_range(values: dict[str, Any], ranges: dict[str, Range], index: int) -> dict[str, Any]:
    """``values`` without what the protocol would refuse (a sensor's 255 °C, an unknown enum): one
    wild reading must not cost the server the whole frame."""
    for name, value in list(values.items()):
        allowed = ranges.get(name)
        if allowed is not None and value is not None and value not in allowed:
            log.warning("GPU %d: %s = %r is outside the protocol's range; reported as absent.", index, name, value)
            del values[name]
    return values


def _handle_key(handle: Any) -> int | None:
    return ctypes.cast(handle, ctypes.c_void_p).value


def _pci_bus_id(raw: str | bytes) -> str | None:
    """NVML's ``00000000:18:00.0`` as lspci and sysfs write it, ``0000:18:00.0``."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    domain, _, rest = text.strip().lower().partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}" if rest else None
    except ValueError:
        return None


def _cuda_version(encoded: int) -> str:
    return f"{encoded // 1000}.{encoded % 1000 // 10}"  # 12040 -> "12.4"


class NvmlCollector:
    """The GPUs of this host, through NVML. ``NodeCollector`` (host.py) adds the network ports."""

    simulated = False

    def __init__(self, hostname: str | None = None) -> None:
        self._hostname = valid_hostname(hostname)  # fail at start, not at the first report
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as error:
            raise NvmlUnavailable(f"NVML could not be initialised: {error}. Is the NVIDIA driver loaded?") from error
        self._pending: list[GpuEvent] = []
        self._fallen: set[int] = set()  # GPUs whose XID 79 was already reported
        self._gpus: list[_Gpu] = []
        self._closed = False
        for index in range(count):
            try:
                self._gpus.append(_Gpu(index, pynvml.nvmlDeviceGetHandleByIndex(index)))
            except pynvml.NVMLError as error:
                log.error("GPU %d cannot be opened (%s); it is left out.", index, error)
                if error.value == _GPU_IS_LOST:
                    self._report_fallen(index, time.time())
        self._by_handle = {_handle_key(gpu.handle): gpu.index for gpu in self._gpus}
        self._event_set = self._open_event_set()
        self.discover()  # learns each GPU's NVLinks, which the NVLink counters need

    # Discovery ---------------------------------------------------------------------------------

    def discover(self) -> Inventory:
        now = time.time()
        gpus = []
        for gpu in list(self._gpus):
            try:
                info = self._describe(gpu)
            except _GpuLost:
                self._lose(gpu, now)
                continue
            if info is not None:
                gpus.append(info)
        host = read_host_facts(
            self._hostname,
            driver_version=self._ask(None, pynvml.nvmlSystemGetDriverVersion),
            cuda_version=self._cuda_version(),
        )
        return Inventory(host=host, gpus=gpus, ports=[])

    def _cuda_version(self) -> str | None:
        encoded = self._ask(None, getattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2", None))
        if encoded is None:
            encoded = self._ask(None, pynvml.nvmlSystemGetCudaDriverVersion)
        return None if encoded is None else _cuda_version(encoded)

    def _ask(self, gpu: _Gpu | None, function: Callable | None, *args: Any) -> Any:
        """One discovery query: None when NVML cannot answer, _GpuLost when the GPU is gone."""
        if function is None:
            return None
        try:
            return function(*args)
        except pynvml.NVMLError as error:
            if error.value == _GPU_IS_LOST and gpu is not None:
                raise _GpuLost from error
            log.debug("%s%s: %s", function.__name__, args[1:], error)
            return None

    def _describe(self, gpu: _Gpu) -> GpuInfo | None:
        handle = gpu.handle
        uuid = self._ask(gpu, pynvml.nvmlDeviceGetUUID, handle)
        if uuid is None:
            log.error("GPU %d has no UUID from NVML; it is left out of the inventory.", gpu.index)
            return None
        memory = self._ask(gpu, pynvml.nvmlDeviceGetMemoryInfo, handle)
        pci = self._ask(gpu, pynvml.nvmlDeviceGetPciInfo, handle)
        limit_mw = self._ask(gpu, pynvml.nvmlDeviceGetPowerManagementLimit, handle)
        facts = {
            "memory_mib": None if memory is None else memory.total // MIB,
            "power_limit_w": None if limit_mw is None else limit_mw / 1000,
            "pcie_gen": self._ask(gpu, pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            "pcie_width": self._ask(gpu, pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
            "pcie_width_current": self._ask(gpu, pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        }
        return GpuInfo(
            index=gpu.index,
            uuid=uuid,
            name=short_text(self._ask(gpu, pynvml.nvmlDeviceGetName, handle)) or "NVIDIA GPU",
            serial=short_text(self._ask(gpu, pynvml.nvmlDeviceGetSerial, handle)),
            pci_bus_id=None if pci is None else _pci_bus_id(pci.busId),
            nvlinks=self._nvlinks(gpu),
            **_in_range(facts, _INFO_RANGES, gpu.index),
        )

    def _nvlinks(self, gpu: _Gpu) -> list[NvLinkPeer]:
        peers = []
        answered = []
        for link in gpu.links:
            try:
                state = pynvml.nvmlDeviceGetNvLinkState(gpu.handle, link)
            except pynvml.NVMLError as error:
                if error.value == _GPU_IS_LOST:
                    raise _GpuLost from error
                if error.value == pynvml.NVML_ERROR_NOT_SUPPORTED and link == 0:
                    break  # no NVLink on this GPU
                continue  # not one of this GPU's links
            answered.append(link)
            active = state == pynvml.NVML_FEATURE_ENABLED
            remote = self._ask(gpu, pynvml.nvmlDeviceGetNvLinkRemotePciInfo, gpu.handle, link) if active else None
            peer = None if remote is None else _pci_bus_id(remote.busId)
            peers.append(NvLinkPeer(link=link, active=active, peer_pci_bus_id=peer))
        gpu.links = tuple(answered)
        gpu.active_links = tuple(peer.link for peer in peers if peer.active)
        return peers

    # Sampling ----------------------------------------------------------------------------------

    def sample(self, now: float) -> NodeSample:
        samples = []
        for gpu in list(self._gpus):
            try:
                samples.append(self._sample_gpu(gpu, now))
            except _GpuLost:
                self._lose(gpu, now)
        return NodeSample(ts=now, gpus=samples)

    def _sample_gpu(self, gpu: _Gpu, now: float) -> GpuSample:
        gpu.now = now
        out: dict[str, Any] = {}
        readers = gpu.readers
        position = 0
        while position < len(readers):  # a retired reader's fallback takes its place and runs at once
            reader = readers[position]
            try:
                reader.read(gpu, out)
            except pynvml.NVMLError as error:
                if error.value == _GPU_IS_LOST:
                    raise _GpuLost from error
                if error.value in _ABSENT_CODES:
                    gpu.retire(position, type(error).__name__)
                    continue
                log.debug("GPU %d: %s failed this sample: %s", gpu.index, reader.function, error)
            except _Unsupported:
                gpu.retire(position, "has nothing to read on this GPU")
                continue
            position += 1
        return GpuSample(index=gpu.index, **_in_range(out, _SAMPLE_RANGES, gpu.index))

    def _lose(self, gpu: _Gpu, now: float) -> None:
        log.error("GPU %d is lost (fallen off the bus); it leaves the samples and the inventory.", gpu.index)
        self._gpus.remove(gpu)
        self._report_fallen(gpu.index, now)

    def _report_fallen(self, index: int, now: float) -> None:
        if index in self._fallen:
            return
        self._fallen.add(index)
        self._pending.append(
            GpuEvent(
                ts=now,
                kind="xid",
                gpu_index=index,
                xid=XID_FALLEN_OFF_THE_BUS,
                data="NVML reports the GPU is lost (NVML_ERROR_GPU_IS_LOST): fallen off the bus",
            )
        )

    # Events ------------------------------------------------------------------------------------

    def _open_event_set(self) -> Any:
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as error:
            log.warning("No NVML event set (%s): XID events will not be reported.", error)
            return None
        for gpu in self._gpus:
            try:
                pynvml.nvmlDeviceRegisterEvents(gpu.handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
            except pynvml.NVMLError as error:
                log.warning("GPU %d cannot report XID events (%s).", gpu.index, error)
        return event_set

    def drain_events(self) -> list[GpuEvent]:
        events, self._pending = self._pending, []
        if self._event_set is None:
            return events
        now = time.time()
        while len(events) < MAX_EVENTS_PER_FRAME:
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, 0)
            except pynvml.NVMLError as error:
                # TIMEOUT: nothing more is waiting; GPU_IS_LOST: sampling reports the loss.
                if error.value not in (pynvml.NVML_ERROR_TIMEOUT, _GPU_IS_LOST):
                    log.warning("Reading NVML events failed: %s", error)
                break
            event = self._xid_event(data, now)
            if event is not None:
                events.append(event)
        return events

    def _xid_event(self, data: Any, now: float) -> GpuEvent | None:
        if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            return None
        index = self._by_handle.get(_handle_key(data.device))
        xid = int(data.eventData)
        if xid == XID_FALLEN_OFF_THE_BUS and index is not None:
            if index in self._fallen:
                return None
            self._fallen.add(index)
        if not 1 <= xid <= 1000:
            return GpuEvent(ts=now, kind="xid", gpu_index=index, data=f"XID event with unexpected data {xid}")
        return GpuEvent(ts=now, kind="xid", gpu_index=index, xid=xid, data=f"XID {xid}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._event_set is not None:
                pynvml.nvmlEventSetFree(self._event_set)
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as error:
            log.warning("Closing NVML: %s", error)
