"""Where telemetry lands: raw samples and rollups in the compact layout (docs/telemetry-storage.md),
the newest sample of each GPU and port, the ingest cursors, and what agents' events left behind."""

from apps.telemetry.models.ingest import AgentEvent, IngestProcess, LatestXid, TelemetryCursor, XidCount
from apps.telemetry.models.latest import GpuMetrics, LatestGpuSample, LatestPortSample, PortReading
from apps.telemetry.models.rollups import (
    ROLLUP_FIELDS,
    ROLLUP_METRICS,
    ROLLUP_PACKING,
    ROLLUP_STATS,
    NodeHourRollup,
    NodeMinuteRollup,
    RollupProgress,
)
from apps.telemetry.models.samples import (
    GPU_FIELDS,
    GPU_METRIC_FIELDS,
    GPU_PACKING,
    PORT_PACKING,
    PORT_SAMPLE_FIELDS,
    NodeGpuSample,
    NodePortSample,
)

__all__ = [
    "GPU_FIELDS",
    "GPU_METRIC_FIELDS",
    "GPU_PACKING",
    "PORT_PACKING",
    "PORT_SAMPLE_FIELDS",
    "ROLLUP_FIELDS",
    "ROLLUP_METRICS",
    "ROLLUP_PACKING",
    "ROLLUP_STATS",
    "AgentEvent",
    "GpuMetrics",
    "IngestProcess",
    "LatestGpuSample",
    "LatestPortSample",
    "LatestXid",
    "NodeGpuSample",
    "NodeHourRollup",
    "NodeMinuteRollup",
    "NodePortSample",
    "PortReading",
    "RollupProgress",
    "TelemetryCursor",
    "XidCount",
]
