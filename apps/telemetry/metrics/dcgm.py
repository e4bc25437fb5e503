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

from collections.abc import Iterator
from datetime import timedelta
from operator import itemgetter
from typing import Any

from django.conf import settings

from apps.core.metrics import Column, Family, Labels, Scrape, by_column, labels
from apps.inventory.metrics import node_label_fields, node_labels
from apps.inventory.models import Gpu
from apps.telemetry.models import GPU_FIELDS, GPU_METRIC_FIELDS, GPU_PACKING, LatestGpuSample, LatestXid

# Values a GPU's series need beyond its newest sample's columns, worked out in ``_fresh_gpus``.
DERIVED = ("fb_free_mib", "last_xid")
_BOOLEANS = tuple(f.name for f in GPU_PACKING.fields if f.kind is bool)
_INDEX = itemgetter(0)  # a GPU's index, first of its unpacked values (GPU_FIELDS)


# Names, types and help texts as dcgm-exporter's default-counters.csv (and dcp-metrics-included.csv) has them.
FAMILIES: tuple[Column, ...] = (
    Column("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    Column("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz"),
    Column("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temp_c"),
    Column("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w"),
    Column("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).", "power_limit_w"),
    Column("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "util_gpu"),
    Column("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "util_mem"),
    Column("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    Column("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "mem_used_mib"),
    Column(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gauge",
        "Current clock throttle reasons (bitmask of NVML clocks event reasons).",
        "throttle_reasons",
    ),
    Column("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "last_xid"),
    Column(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        "ecc_corrected_volatile",
    ),
    Column(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        "ecc_uncorrected_volatile",
    ),
    Column(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        "ecc_corrected_aggregate",
    ),
    Column(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        "ecc_uncorrected_aggregate",
    ),
    Column(
        "DCGM_FI_DEV_RETIRED_PENDING",
        "gauge",
        "Whether pages are pending retirement (1) or not (0).",
        "retired_pages_pending",
    ),
    Column(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether remapping of rows is pending (1) or not (0).",
        "remapped_rows_pending",
    ),
    Column(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed (1) or not (0).",
        "remapped_rows_failed",
    ),
    Column(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors.",
        "remapped_rows_correctable",
    ),
    Column(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors.",
        "remapped_rows_uncorrectable",
    ),
    Column("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "pcie_replay_count"),
    Column(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        "nvlink_crc_errors",
    ),
    Column(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink retries.",
        "nvlink_replay_errors",
    ),
    Column(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink recovery errors.",
        "nvlink_recovery_errors",
    ),
    Column(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus, in bytes per second.",
        "pcie_tx_kbps",
        1024,
    ),
    Column(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus, in bytes per second.",
        "pcie_rx_kbps",
        1024,
    ),
    Column(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "gauge",
        "The rate of data transmitted over NVLink, in bytes per second.",
        "nvlink_tx_kbps",
        1024,
    ),
    Column(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "gauge",
        "The rate of data received over NVLink, in bytes per second.",
        "nvlink_rx_kbps",
        1024,
    ),
    Column(
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "gauge",
        "Recovery action the driver recommends (0 none, 1 GPU reset, 2 node reboot, 3 drain peer, 4 drain and reset).",
        "recovery_action",
    ),
)


def collect(scrape: Scrape) -> Iterator[Family]:
    """Three queries whatever the fleet's size."""
    return by_column(FAMILIES, _fresh_gpus(scrape))


def _fresh_gpus(scrape: Scrape) -> list[tuple[Labels, dict[str, Any]]]:
    """Each fresh GPU's labels and newest sample (booleans as 0 and 1, DERIVED added), by node and GPU:
    each node's row unpacked here, its GPUs in index order."""
    max_age = timedelta(seconds=settings.TELEMETRY_METRICS_MAX_AGE_S)
    fresh = scrape.within(LatestGpuSample.objects.filter(ts__gte=scrape.now - max_age), "node__cluster__name")
    nodes = fresh.order_by("node__hostname").unpacked(GPU_FIELDS, "node_id", *node_label_fields("node__"))
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
    gpus = []
    for (node_id, hostname, cluster, rack), readings in nodes:
        for index, *values in sorted(readings, key=_INDEX):
            sample = dict(zip(GPU_METRIC_FIELDS, values, strict=True))
            key = (node_id, index)
            uuid, model, pci_bus_id, memory_mib = inventory.get(key, ("", "", "", None))
            used = sample["mem_used_mib"]
            sample["fb_free_mib"] = memory_mib - used if used is not None and memory_mib is not None else None
            sample["last_xid"] = xids.get(key)
            for name in _BOOLEANS:
                if sample[name] is not None:
                    sample[name] = int(sample[name])
            pairs = (
                ("gpu", str(index)),
                ("UUID", uuid),
                ("pci_bus_id", pci_bus_id),
                ("device", f"nvidia{index}"),
                ("modelName", model),
                *node_labels(hostname, cluster, rack),
            )
            gpus.append((labels(pairs), sample))
    return gpus
