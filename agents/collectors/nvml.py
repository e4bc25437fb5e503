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
it is only the fallback for the byte counters. The readers, the batch's field table and their
fallbacks are ``agents.collectors.nvml_readers``; this module discovers the GPUs, samples them,
keeps each reading inside the protocol's ranges, and reports lost GPUs and XID events.
"""

import ctypes
import logging
import time
from collections.abc import Callable
from typing import Any, Final

import pynvml

from agents.collectors.hostfacts import read_host_facts, short_text, valid_hostname
from agents.collectors.nvml_readers import GPU_IS_LOST, MIB, GpuLost, NvmlGpu
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

XID_FALLEN_OFF_THE_BUS: Final = 79


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or initialised (no driver, no GPU, a driver/library mismatch)."""


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
        self._gpus: list[NvmlGpu] = []
        self._closed = False
        for index in range(count):
            try:
                self._gpus.append(NvmlGpu(index, pynvml.nvmlDeviceGetHandleByIndex(index)))
            except pynvml.NVMLError as error:
                log.error("GPU %d cannot be opened (%s); it is left out.", index, error)
                if error.value == GPU_IS_LOST:
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
            except GpuLost:
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

    def _ask(self, gpu: NvmlGpu | None, function: Callable | None, *args: Any) -> Any:
        """One discovery query: None when NVML cannot answer, GpuLost when the GPU is gone."""
        if function is None:
            return None
        try:
            return function(*args)
        except pynvml.NVMLError as error:
            if error.value == GPU_IS_LOST and gpu is not None:
                raise GpuLost from error
            log.debug("%s%s: %s", function.__name__, args[1:], error)
            return None

    def _describe(self, gpu: NvmlGpu) -> GpuInfo | None:
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
            "slowdown_temp_c": self._ask(
                gpu, pynvml.nvmlDeviceGetTemperatureThreshold, handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
            ),
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

    def _nvlinks(self, gpu: NvmlGpu) -> list[NvLinkPeer]:
        peers = []
        answered = []
        for link in gpu.links:
            try:
                state = pynvml.nvmlDeviceGetNvLinkState(gpu.handle, link)
            except pynvml.NVMLError as error:
                if error.value == GPU_IS_LOST:
                    raise GpuLost from error
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
                samples.append(GpuSample(index=gpu.index, **_in_range(gpu.read(now), _SAMPLE_RANGES, gpu.index)))
            except GpuLost:
                self._lose(gpu, now)
        return NodeSample(ts=now, gpus=samples)

    def _lose(self, gpu: NvmlGpu, now: float) -> None:
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
                if error.value not in (pynvml.NVML_ERROR_TIMEOUT, GPU_IS_LOST):
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
