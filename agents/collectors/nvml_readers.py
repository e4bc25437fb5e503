"""What one GPU's sample reads from NVML, and how: the readers (one NVML call each, filling one or
more ``GpuSample`` fields), the field-value batch with its table and converters, and ``NvmlGpu``, a
GPU's handle with what it has shown it supports. ``agents.collectors.nvml`` is the collector built on it.

A reader or batched field whose answer cannot change by asking again (``ABSENT_CODES``) is retired
for that GPU, and its fallback, if it has one, takes its place; other errors leave its fields absent
for that sample only. Rates of cumulative counters (the NVLink and PCIe byte counters) are taken
against the time NVML stamped the value with, or the sample's time where the driver gives none.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pynvml

log = logging.getLogger(__name__)

MIB: Final = 1024 * 1024
_ALL_LINKS: Final = 0xFFFFFFFF  # scopeId UINT_MAX: "aggregate value summed up across all links" (nvml.h)

# Answers that asking again will not change: the field is absent on this GPU.
ABSENT_CODES: Final = frozenset(
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
GPU_IS_LOST: Final = pynvml.NVML_ERROR_GPU_IS_LOST

# The clocks-event-reasons function was called "throttle reasons" before driver 535.
_CLOCK_EVENT_REASONS: Final = (
    "nvmlDeviceGetCurrentClocksEventReasons"
    if hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")
    else "nvmlDeviceGetCurrentClocksThrottleReasons"
)


class GpuLost(Exception):
    """NVML answered GPU_IS_LOST: the GPU has fallen off the bus."""


class _Unsupported(Exception):
    """A reader's field cannot exist on this GPU (for example NVLink counters on a GPU without NVLink)."""


# Readers: one NVML call each, filling one or more GpuSample fields ------------------------------


@dataclass(frozen=True, eq=False)
class _Reader:
    function: str  # the NVML function it calls, for the log
    fields: tuple[str, ...]  # the GpuSample fields it fills
    read: Callable[["NvmlGpu", dict[str, Any], float], None]
    fallback: "_Reader | None" = None  # what to ask instead once this is known to be absent


def _reader(function: str, *fields: str, fallback: _Reader | None = None) -> Callable:
    def wrap(read: Callable[["NvmlGpu", dict[str, Any], float], None]) -> _Reader:
        return _Reader(function, fields, read, fallback)

    return wrap


@_reader("nvmlDeviceGetUtilizationRates", "util_gpu", "util_mem")
def _utilization(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    rates = pynvml.nvmlDeviceGetUtilizationRates(gpu.handle)
    out["util_gpu"] = float(rates.gpu)
    out["util_mem"] = float(rates.memory)


@_reader("nvmlDeviceGetMemoryInfo", "mem_used_mib")
def _memory_used(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    out["mem_used_mib"] = pynvml.nvmlDeviceGetMemoryInfo(gpu.handle).used // MIB


@_reader("nvmlDeviceGetTemperature", "temp_c")
def _temperature(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    out["temp_c"] = float(pynvml.nvmlDeviceGetTemperature(gpu.handle, pynvml.NVML_TEMPERATURE_GPU))


@_reader("nvmlDeviceGetPowerUsage", "power_w")
def _power(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    out["power_w"] = pynvml.nvmlDeviceGetPowerUsage(gpu.handle) / 1000  # milliwatts


@_reader("nvmlDeviceGetEnforcedPowerLimit", "power_limit_w")
def _power_limit(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    out["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(gpu.handle) / 1000


@_reader("nvmlDeviceGetClockInfo", "sm_clock_mhz")
def _sm_clock(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    out["sm_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(gpu.handle, pynvml.NVML_CLOCK_SM)


@_reader("nvmlDeviceGetClockInfo", "mem_clock_mhz")
def _mem_clock(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    out["mem_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(gpu.handle, pynvml.NVML_CLOCK_MEM)


@_reader("nvmlDeviceGetCurrentClocksThrottleReasons", "throttle_reasons")
def _throttle_reasons(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    out["throttle_reasons"] = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(gpu.handle)


@_reader(_CLOCK_EVENT_REASONS, "throttle_reasons", fallback=_throttle_reasons)
def _clock_event_reasons(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    # A binding newer than the driver knows the new name while the library lacks the symbol
    # (FUNCTION_NOT_FOUND): the fallback asks under the old name.
    out["throttle_reasons"] = getattr(pynvml, _CLOCK_EVENT_REASONS)(gpu.handle)


def _total_ecc(field: str, error_type: int, counter_type: int) -> _Reader:
    def read(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
        out[field] = pynvml.nvmlDeviceGetTotalEccErrors(gpu.handle, error_type, counter_type)

    return _Reader("nvmlDeviceGetTotalEccErrors", (field,), read)


@_reader("nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending")
def _retired_pages_pending(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    out["retired_pages_pending"] = pynvml.nvmlDeviceGetRetiredPagesPendingStatus(gpu.handle) != 0


@_reader(
    "nvmlDeviceGetRemappedRows",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "remapped_rows_pending",
    "remapped_rows_failed",
)
def _remapped_rows(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    correctable, uncorrectable, pending, failed = pynvml.nvmlDeviceGetRemappedRows(gpu.handle)
    out["remapped_rows_correctable"] = correctable
    out["remapped_rows_uncorrectable"] = uncorrectable
    out["remapped_rows_pending"] = pending != 0
    out["remapped_rows_failed"] = failed != 0


@_reader("nvmlDeviceGetPcieReplayCounter", "pcie_replay_count")
def _pcie_replay(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    out["pcie_replay_count"] = pynvml.nvmlDeviceGetPcieReplayCounter(gpu.handle)


def _nvlink_error_sum(field: str, counter: int) -> _Reader:
    def read(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
        if not gpu.active_links:
            raise _Unsupported
        out[field] = sum(pynvml.nvmlDeviceGetNvLinkErrorCounter(gpu.handle, link, counter) for link in gpu.active_links)

    return _Reader("nvmlDeviceGetNvLinkErrorCounter", (field,), read)


def _pcie_throughput(field: str, counter: int) -> _Reader:
    def read(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
        out[field] = pynvml.nvmlDeviceGetPcieThroughput(gpu.handle, counter)  # KB/s over the driver's 20 ms

    return _Reader("nvmlDeviceGetPcieThroughput", (field,), read)


@_reader("nvmlDeviceGetFieldValues", "nvlink_tx_kbps", "nvlink_rx_kbps")
def _nvlink_throughput_per_link(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
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
    at = _read_at(max(value.timestamp for value in values), now)
    half = len(links)
    out["nvlink_tx_kbps"] = _kib_rate(gpu, "nvlink_tx_kbps", sum(_field_value(v) for v in values[:half]), at)
    out["nvlink_rx_kbps"] = _kib_rate(gpu, "nvlink_rx_kbps", sum(_field_value(v) for v in values[half:]), at)


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


def _read_at(stamp_us: int, now: float) -> float:
    """When NVML read a value, in seconds: its own timestamp, or the sample's time when it gives none."""
    return stamp_us / 1e6 if stamp_us > 0 else now


def _as_count(gpu: "NvmlGpu", name: str, raw: float, at: float) -> int:
    return int(raw)


def _as_flag(gpu: "NvmlGpu", name: str, raw: float, at: float) -> bool:
    return raw != 0


def _kib_rate(gpu: "NvmlGpu", name: str, raw: float, at: float) -> int | None:
    per_second = gpu.rate(name, raw, at)
    return None if per_second is None else int(per_second * 1024 / 1000)  # KiB/s to kB/s


def _byte_rate(gpu: "NvmlGpu", name: str, raw: float, at: float) -> int | None:
    per_second = gpu.rate(name, raw, at)
    return None if per_second is None else int(per_second / 1000)


@dataclass(frozen=True, eq=False)
class _Field:
    field_id: int
    scope: int
    name: str  # the GpuSample field
    convert: Callable[["NvmlGpu", str, float, float], Any]  # (gpu, name, raw value, when it was read)
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
def _field_batch(gpu: "NvmlGpu", out: dict[str, Any], now: float) -> None:
    fields = tuple(gpu.fields)
    values = pynvml.nvmlDeviceGetFieldValues(gpu.handle, gpu.field_ids)
    for field, value in zip(fields, values, strict=True):
        code = value.nvmlReturn
        if code == pynvml.NVML_SUCCESS:
            out[field.name] = field.convert(gpu, field.name, _field_value(value), _read_at(value.timestamp, now))
        elif code == GPU_IS_LOST:
            raise pynvml.NVMLError(code)
        elif code in ABSENT_CODES:
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


class NvmlGpu:
    """One GPU's handle, what it has shown it supports, and the reading of its sample."""

    __slots__ = ("active_links", "counters", "field_ids", "fields", "handle", "index", "links", "readers")

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle
        self.readers: list[_Reader] = list(_READERS)
        self.fields: list[_Field] = list(_BATCHED_FIELDS)
        self.field_ids = [(field.field_id, field.scope) for field in self.fields]
        self.links: tuple[int, ...] = tuple(range(pynvml.NVML_NVLINK_MAX_LINKS))  # narrowed by discovery
        self.active_links: tuple[int, ...] = ()
        self.counters: dict[str, tuple[float, float]] = {}

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

    def rate(self, name: str, counter: float, at: float) -> float | None:
        """Per-second rate of a cumulative counter read at ``at`` (seconds) since its previous reading;
        None on the first one or when the counter went backwards (a wrap or a driver reload)."""
        previous = self.counters.get(name)
        self.counters[name] = (counter, at)
        if previous is None:
            return None
        delta, elapsed = counter - previous[0], at - previous[1]
        if delta < 0 or elapsed <= 0:
            return None
        return delta / elapsed

    def read(self, now: float) -> dict[str, Any]:
        """The sample's fields this GPU could read at ``now`` (unchecked against the protocol's ranges);
        GpuLost when it has fallen off the bus."""
        out: dict[str, Any] = {}
        readers = self.readers
        position = 0
        while position < len(readers):  # a retired reader's fallback takes its place and runs at once
            reader = readers[position]
            try:
                reader.read(self, out, now)
            except pynvml.NVMLError as error:
                if error.value == GPU_IS_LOST:
                    raise GpuLost from error
                if error.value in ABSENT_CODES:
                    self.retire(position, type(error).__name__)
                    continue
                log.debug("GPU %d: %s failed this sample: %s", self.index, reader.function, error)
            except _Unsupported:
                self.retire(position, "has nothing to read on this GPU")
                continue
            position += 1
        return out
