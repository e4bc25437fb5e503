"""``/metrics``: the newest sample of every GPU in the Prometheus text format (0.0.4), with
dcgm-exporter's metric names, types and labels, so dashboards built for dcgm-exporter work as they are.

What differs from dcgm-exporter, on purpose:
- One endpoint for the whole fleet (the control plane already has every node's samples), so the
  ``Hostname`` label tells nodes apart, as it does in dcgm-exporter's own output.
- A GPU whose newest sample is older than ``TELEMETRY_METRICS_MAX_AGE_S`` is left out, as a dead
  node's exporter would be unreachable: its series go stale instead of repeating old values.
- A field the GPU did not report is left out, never exported as 0.
- ``promtool check metrics`` parses the output without error; its lint notes only dcgm-exporter's
  own naming (the camelCase ``modelName`` label; counters named ``..._TOTAL`` rather than
  ``..._total``, and ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``), kept because dashboards query those names.

Authentication: an API token (any role) in ``Authorization: Bearer``; Prometheus sends it with
``authorization: {credentials: ...}`` in its scrape config.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.inventory.models import Gpu
from apps.telemetry.models import GPU_METRIC_FIELDS, LatestGpuSample, LatestXid

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Number = int | float


@dataclass(frozen=True)
class _Gpu:
    """Everything one GPU's lines need: its newest sample, its inventory row, its last XID."""

    sample: dict[str, Any]
    hostname: str
    uuid: str
    model: str
    pci_bus_id: str
    memory_mib: int | None
    last_xid: int | None


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    help: str
    value: Callable[[_Gpu], Number | bool | None]


def _field(name: str, scale: int = 1) -> Callable[[_Gpu], Number | bool | None]:
    def value(gpu: _Gpu) -> Number | bool | None:
        reading = gpu.sample[name]
        return reading * scale if reading is not None and scale != 1 else reading

    return value


def _fb_free(gpu: _Gpu) -> int | None:
    used = gpu.sample["mem_used_mib"]
    return gpu.memory_mib - used if used is not None and gpu.memory_mib is not None else None


# Names, types and help texts as dcgm-exporter's default-counters.csv (and dcp-metrics-included.csv) has them.
FAMILIES: tuple[Family, ...] = (
    Family("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", _field("sm_clock_mhz")),
    Family("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", _field("mem_clock_mhz")),
    Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", _field("temp_c")),
    Family("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", _field("power_w")),
    Family("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).", _field("power_limit_w")),
    Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", _field("util_gpu")),
    Family("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", _field("util_mem")),
    Family("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", _fb_free),
    Family("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", _field("mem_used_mib")),
    Family(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gauge",
        "Current clock throttle reasons (bitmask of NVML clocks event reasons).",
        _field("throttle_reasons"),
    ),
    Family("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda g: g.last_xid),
    Family(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        _field("ecc_corrected_volatile"),
    ),
    Family(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        _field("ecc_uncorrected_volatile"),
    ),
    Family(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        _field("ecc_corrected_aggregate"),
    ),
    Family(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        _field("ecc_uncorrected_aggregate"),
    ),
    Family(
        "DCGM_FI_DEV_RETIRED_PENDING",
        "gauge",
        "Whether pages are pending retirement (1) or not (0).",
        _field("retired_pages_pending"),
    ),
    Family(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether remapping of rows is pending (1) or not (0).",
        _field("remapped_rows_pending"),
    ),
    Family(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed (1) or not (0).",
        _field("remapped_rows_failed"),
    ),
    Family(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors.",
        _field("remapped_rows_correctable"),
    ),
    Family(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors.",
        _field("remapped_rows_uncorrectable"),
    ),
    Family("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", _field("pcie_replay_count")),
    Family(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        _field("nvlink_crc_errors"),
    ),
    Family(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink retries.",
        _field("nvlink_replay_errors"),
    ),
    Family(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink recovery errors.",
        _field("nvlink_recovery_errors"),
    ),
    Family(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus, in bytes per second.",
        _field("pcie_tx_kbps", 1024),
    ),
    Family(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus, in bytes per second.",
        _field("pcie_rx_kbps", 1024),
    ),
    Family(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "gauge",
        "The rate of data transmitted over NVLink, in bytes per second.",
        _field("nvlink_tx_kbps", 1024),
    ),
    Family(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "gauge",
        "The rate of data received over NVLink, in bytes per second.",
        _field("nvlink_rx_kbps", 1024),
    ),
    Family(
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "gauge",
        "Recovery action the driver recommends (0 none, 1 GPU reset, 2 node reboot, 3 drain peer, 4 drain and reset).",
        _field("recovery_action"),
    ),
)


def render_metrics(now: datetime) -> str:
    """The exposition text. Three queries whatever the fleet's size."""
    gpus = list(_fresh_gpus(now))
    lines: list[str] = []
    labels = [_labels(gpu) for gpu in gpus]
    for family in FAMILIES:
        values = [(label, family.value(gpu)) for label, gpu in zip(labels, gpus, strict=True)]
        present = [(label, value) for label, value in values if value is not None]
        if not present:
            continue
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.type}")
        lines.extend(f"{family.name}{{{label}}} {_number(value)}" for label, value in present)
    return "\n".join(lines) + "\n" if lines else ""


def _fresh_gpus(now: datetime) -> Iterator[_Gpu]:
    fresh = LatestGpuSample.objects.filter(ts__gte=now - timedelta(seconds=settings.TELEMETRY_METRICS_MAX_AGE_S))
    samples = fresh.order_by("node__hostname", "gpu_index").values(
        "node_id", "node__hostname", "gpu_index", *GPU_METRIC_FIELDS
    )
    inventory = {
        (node_id, index): (uuid, model, pci_bus_id, memory_mib)
        for node_id, index, uuid, model, pci_bus_id, memory_mib in Gpu.objects.filter(
            node_id__in=fresh.values("node_id")
        ).values_list("node_id", "index", "uuid", "model", "pci_bus_id", "memory_mib")
    }
    xids = {(node_id, gpu): xid for node_id, gpu, xid in LatestXid.objects.values_list("node_id", "gpu_index", "xid")}
    for sample in samples:
        key = (sample["node_id"], sample["gpu_index"])
        uuid, model, pci_bus_id, memory_mib = inventory.get(key, ("", "", "", None))
        yield _Gpu(sample, sample["node__hostname"], uuid, model, pci_bus_id, memory_mib, xids.get(key))


def _labels(gpu: _Gpu) -> str:
    index = gpu.sample["gpu_index"]
    pairs = (
        ("gpu", str(index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", f"nvidia{index}"),
        ("modelName", gpu.model),
        ("Hostname", gpu.hostname),
    )
    return ",".join(f'{name}="{_escape(value)}"' for name, value in pairs)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def _number(value: Number | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)


# The view ------------------------------------------------------------------------------------


class PrometheusTextRenderer(BaseRenderer):
    media_type = "text/plain"
    format = "prometheus"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if isinstance(data, str):
            return data.encode()
        detail = data.get("detail", data) if isinstance(data, dict) else data
        return f"# {detail}\n".encode()  # an error (401, 403) as a comment a human can read


class _AlwaysText(BaseContentNegotiation):
    """Prometheus, curl and browsers all get the text format, whatever they put in Accept."""

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return parsers[0] if parsers else None


class MetricsView(APIView):
    renderer_classes = [PrometheusTextRenderer]
    content_negotiation_class = _AlwaysText

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        return Response(render_metrics(timezone.now()), content_type=CONTENT_TYPE)
