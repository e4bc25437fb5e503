"""Where telemetry lands: raw samples and rollups in the compact layout (docs/telemetry-storage.md),
each node's newest GPU and port samples, the ingest cursors, and what agents' events left behind."""

from apps.telemetry.models.ingest import (
    AgentEvent,
    IngestProcess,
    LatestXid,
    TelemetryCursor,
    TelemetrySeqLog,
    TelemetrySeqLogState,
    XidCount,
)
from apps.telemetry.models.latest import LatestGpuSample, LatestPortSample, Reading
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
    "IngestProcess",
    "LatestGpuSample",
    "LatestPortSample",
    "LatestXid",
    "NodeGpuSample",
    "NodeHourRollup",
    "NodeMinuteRollup",
    "NodePortSample",
    "Reading",
    "RollupProgress",
    "TelemetryCursor",
    "TelemetrySeqLog",
    "TelemetrySeqLogState",
    "XidCount",
]
