"""Builders for telemetry messages shaped like what the agent sends."""

from datetime import datetime

import msgspec
import pytest

from agents.protocol import GpuSample, NodeSample, PortSample, Telemetry
from apps.inventory.models import Node
from apps.telemetry import storage
from apps.telemetry.models import ROLLUP_FIELDS, ROLLUP_METRICS, ROLLUP_PACKING, NodeGpuSample, NodePortSample
from apps.telemetry.models.rollups import NodeRollup
from apps.telemetry.queries import in_units, metric_field
from apps.telemetry.rollups import ROLLUP_COLUMNS, Stats, rollup_row
from tests import factories

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


def gpu_sample(index: int, *, util: float = 50.0, power: float = 400.0, **fields: object) -> GpuSample:
    values = {"util_gpu": util, "util_mem": util / 2, "mem_used_mib": 40_000, "temp_c": 60.0, "power_w": power}
    values.update(fields)
    return GpuSample(index=index, sm_clock_mhz=1980, **values)


def _kinds(struct: type) -> dict[str, msgspec.inspect.Type]:
    """Each field's type, without its ``| None``."""
    info = msgspec.inspect.type_info(struct)
    union = msgspec.inspect.UnionType
    return {
        f.name: next(t for t in f.type.types if not isinstance(t, msgspec.inspect.NoneType))
        if isinstance(f.type, union)
        else f.type
        for f in info.fields
    }


def _every_field(struct: type, fixed: dict[str, object], *, high: bool) -> dict[str, object]:
    """A value for each field not in ``fixed``: distinct small ones, or each field's largest (``high``)."""
    values = dict(fixed)
    for n, (name, kind) in enumerate(_kinds(struct).items(), start=1):
        if name in values:
            continue
        if isinstance(kind, msgspec.inspect.BoolType):
            values[name] = high or n % 2 == 0
        elif isinstance(kind, msgspec.inspect.FloatType):
            values[name] = float(kind.le) if high else n + 0.25
        else:
            values[name] = int(kind.le) if high else n
    return values


def every_gpu_field(index: int, *, high: bool = False) -> GpuSample:
    """A GPU reporting every field, with distinct small values or each field's largest (``high``)."""
    return GpuSample(**_every_field(GpuSample, {"index": index}, high=high))


def every_port_field(device: str, *, high: bool = False) -> PortSample:
    fixed = {"device": device, "port": 255 if high else 1, "state": "polling" if high else "active"}
    return PortSample(**_every_field(PortSample, fixed, high=high))


def node_sample(ts: float, *, gpus: int = 8, util: float = 50.0, ports: int = 1) -> NodeSample:
    return NodeSample(
        ts=ts,
        gpus=[gpu_sample(i, util=util) for i in range(gpus)],
        ports=[
            PortSample(device=f"mlx5_{p}", port=1, state="active", rate_gbps=400.0, tx_gbps=12.5, rx_gbps=3.0)
            for p in range(ports)
        ],
    )


def telemetry(seq: int, *, ts: float = T0, samples: int = 1, gpus: int = 8, util: float = 50.0) -> Telemetry:
    """Message ``seq`` carrying ``samples`` one-second samples starting at ``ts``."""
    return Telemetry(seq=seq, samples=[node_sample(ts + i, gpus=gpus, util=util) for i in range(samples)])


@pytest.fixture
def make_node(db: None):
    cluster, node_type = factories.cluster(), factories.node_type(nics=0)

    def make() -> Node:
        return factories.node(cluster, node_type)

    return make


@pytest.fixture
def refused_newest_ports(monkeypatch):
    """The database refuses every batch's newest port rows, the last thing a batch writes (an upsert
    into a table without the node key it names)."""
    refused = storage._LatestTable(NodePortSample, storage.PORT_SAMPLE_COLUMNS)
    monkeypatch.setattr(storage, "_LATEST_PORTS", refused)


def raw(node: Node, ts: datetime, gpus: list[GpuSample], *, received: datetime | None = None) -> NodeGpuSample:
    """A raw row of ``node``'s GPUs at ``ts``, for bulk_create."""
    return NodeGpuSample.of(node.pk, ts, gpus, received or ts)


def rollup(model: type[NodeRollup], node: Node, bucket: datetime, gpus: dict[int, Stats]) -> NodeRollup:
    """A rollup row of ``node`` for ``bucket``, each GPU's stats made with ``stats_of``."""
    return model(**dict(zip(ROLLUP_COLUMNS, rollup_row(node.pk, bucket, gpus), strict=True)))


def summaries(row: NodeRollup) -> dict[int, dict[str, object]]:
    """A rollup row read back, by GPU: ``samples``, and each metric's (min, mean, max) or None."""
    found: dict[int, dict[str, object]] = {}
    for item in ROLLUP_PACKING.unpack(row.gpus):
        stats = dict(zip(ROLLUP_FIELDS, item, strict=True))
        gpu: dict[str, object] = {"samples": stats["samples"]}
        for metric in ROLLUP_METRICS:
            n, field = stats[f"{metric}_n"], metric_field(metric)
            gpu[metric] = (
                (
                    in_units(field, stats[f"{metric}_min"]),
                    in_units(field, stats[f"{metric}_sum"] / n),
                    in_units(field, stats[f"{metric}_max"]),
                )
                if n
                else None
            )
        found[stats["index"]] = gpu
    return found
