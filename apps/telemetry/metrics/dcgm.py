"""dcgm-exporter's part of ``/metrics`` (apps/core/metrics.py): the newest sample of every GPU, with
dcgm-exporter's metric names, types and labels, so dashboards built for dcgm-exporter work as they are.

What differs from dcgm-exporter, on purpose:
- One endpoint for the whole fleet (the control plane already has every node's samples), so the
  ``Hostname`` label tells nodes apart, as it does in dcgm-exporter's own output; ``cluster`` and
  ``rack`` are added, as a relabelling Prometheus config would.
- A GPU whose newest sample is older than ``TELEMETRY_METRICS_MAX_AGE_S`` is left out, as a dead
  node's exporter would be unreachable: its series go stale instead of repeating old values.
- A field the GPU did not report is left out, never exported as 0.
- ``promtool check metrics`` parses the output without error; its lint notes only dcgm-exporter's
  own naming (the camelCase ``modelName`` label; counters named ``..._TOTAL`` rather than
  ``..._total``, and ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``), kept because dashboards query those names.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from django.conf import settings

from apps.core.metrics import Family, Number, Scrape, labels
from apps.inventory.metrics import node_label_fields, node_labels
from apps.inventory.models import Gpu
from apps.telemetry.models import GPU_METRIC_FIELDS, LatestGpuSample, LatestXid


@dataclass(frozen=True)
class _Gpu:
    """Everything one GPU's lines need: its newest sample, its inventory row, its last XID."""

    sample: dict[str, Any]
    hostname: str
    cluster: str
    rack: str | None
    uuid: str
    model: str
    pci_bus_id: str
    memory_mib: int | None
    last_xid: int | None


@dataclass(frozen=True)
class GpuFamily:
    name: str
    type: Literal["gauge", "counter"]
    help: str
    value: Callable[[_Gpu], Number | None]


def _field(name: str, scale: int = 1) -> Callable[[_Gpu], Number | None]:
    def value(gpu: _Gpu) -> Number | None:
        reading = gpu.sample[name]
        return reading * scale if reading is not None and scale != 1 else reading

    return value


def _fb_free(gpu: _Gpu) -> int | None:
    used = gpu.sample["mem_used_mib"]
    return gpu.memory_mib - used if used is not None and gpu.memory_mib is not None else None


# Names, types and help texts as dcgm-exporter's default-counters.csv (and dcp-metrics-included.csv) has them.
FAMILIES: tuple[GpuFamily, ...] = (
    GpuFamily("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", _field("sm_clock_mhz")),
    GpuFamily("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", _field("mem_clock_mhz")),
    GpuFamily("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", _field("temp_c")),
    GpuFamily("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", _field("power_w")),
    GpuFamily("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).", _field("power_limit_w")),
    GpuFamily("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", _field("util_gpu")),
    GpuFamily("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", _field("util_mem")),
    GpuFamily("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", _fb_free),
    GpuFamily("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", _field("mem_used_mib")),
    GpuFamily(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gauge",
        "Current clock throttle reasons (bitmask of NVML clocks event reasons).",
        _field("throttle_reasons"),
    ),
    GpuFamily("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda g: g.last_xid),
    GpuFamily(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        _field("ecc_corrected_volatile"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        _field("ecc_uncorrected_volatile"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        _field("ecc_corrected_aggregate"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        _field("ecc_uncorrected_aggregate"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_RETIRED_PENDING",
        "gauge",
        "Whether pages are pending retirement (1) or not (0).",
        _field("retired_pages_pending"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether remapping of rows is pending (1) or not (0).",
        _field("remapped_rows_pending"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed (1) or not (0).",
        _field("remapped_rows_failed"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors.",
        _field("remapped_rows_correctable"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors.",
        _field("remapped_rows_uncorrectable"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", _field("pcie_replay_count")
    ),
    GpuFamily(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        _field("nvlink_crc_errors"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink retries.",
        _field("nvlink_replay_errors"),
    ),
    GpuFamily(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink recovery errors.",
        _field("nvlink_recovery_errors"),
    ),
    GpuFamily(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus, in bytes per second.",
        _field("pcie_tx_kbps", 1024),
    ),
    GpuFamily(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus, in bytes per second.",
        _field("pcie_rx_kbps", 1024),
    ),
    GpuFamily(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "gauge",
        "The rate of data transmitted over NVLink, in bytes per second.",
        _field("nvlink_tx_kbps", 1024),
    ),
    GpuFamily(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "gauge",
        "The rate of data received over NVLink, in bytes per second.",
        _field("nvlink_rx_kbps", 1024),
    ),
    GpuFamily(
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "gauge",
        "Recovery action the driver recommends (0 none, 1 GPU reset, 2 node reboot, 3 drain peer, 4 drain and reset).",
        _field("recovery_action"),
    ),
)


def collect(scrape: Scrape) -> Iterator[Family]:
    """Three queries whatever the fleet's size."""
    gpus = list(_fresh_gpus(scrape))
    gpu_labels = [labels(gpu_label_pairs(gpu)) for gpu in gpus]
    for family in FAMILIES:
        values = ((label, family.value(gpu)) for label, gpu in zip(gpu_labels, gpus, strict=True))
        yield Family(family.name, family.type, family.help, [(label, v) for label, v in values if v is not None])


def _fresh_gpus(scrape: Scrape) -> Iterator[_Gpu]:
    max_age = timedelta(seconds=settings.TELEMETRY_METRICS_MAX_AGE_S)
    fresh = scrape.within(LatestGpuSample.objects.filter(ts__gte=scrape.now - max_age), "node__cluster__name")
    samples = fresh.order_by("node__hostname", "gpu_index").values(
        "node_id", *node_label_fields("node__"), "gpu_index", *GPU_METRIC_FIELDS
    )
    inventory = {
        (node_id, index): (uuid, model, pci_bus_id, memory_mib)
        for node_id, index, uuid, model, pci_bus_id, memory_mib in Gpu.objects.filter(
            node_id__in=fresh.values("node_id")
        ).values_list("node_id", "index", "uuid", "model", "pci_bus_id", "memory_mib")
    }
    xids = {
        (node_id, gpu): xid
        for node_id, gpu, xid in LatestXid.objects.filter(node_id__in=fresh.values("node_id")).values_list(
            "node_id", "gpu_index", "xid"
        )
    }
    for sample in samples:
        key = (sample["node_id"], sample["gpu_index"])
        uuid, model, pci_bus_id, memory_mib = inventory.get(key, ("", "", "", None))
        yield _Gpu(
            sample,
            sample["node__hostname"],
            sample["node__cluster__name"],
            sample["node__rack__name"],
            uuid,
            model,
            pci_bus_id,
            memory_mib,
            xids.get(key),
        )


def gpu_label_pairs(gpu: _Gpu) -> tuple[tuple[str, str], ...]:
    """dcgm-exporter's labels of a GPU, then the node's cluster and rack."""
    index = gpu.sample["gpu_index"]
    return (
        ("gpu", str(index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", f"nvidia{index}"),
        ("modelName", gpu.model),
        *node_labels(gpu.hostname, gpu.cluster, gpu.rack),
    )
