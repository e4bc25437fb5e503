"""What the live streams send through the channel layer: its groups, and the telemetry messages.

Groups (one per resource, DESIGN.md): ``node.<id>`` (a node's telemetry, state and failures),
``fleet`` (every node's summary and state), ``failures`` (the failures page's feed) and ``runs``
(the runs pages' feed, and the fleet page's running jobs). The ``ws/live``
consumer (apps/dashboard/consumers.py) joins them for what its browser holds; the live publisher
(apps/dashboard/live.py) and the change publisher (apps/dashboard/publish.py) send to them.

Messages (channel layer ``type`` → consumer handler): ``telemetry.node`` {node, ts, gpus: [{index,
LIVE_GPU_FIELDS...}]}, ``telemetry.fleet`` {nodes: [fleet_entry...]}; publish.py describes the others.
"""

from collections.abc import Sequence
from statistics import fmean
from typing import Any, Protocol

from agents.protocol import NodeSample

FLEET_GROUP = "fleet"
FAILURES_GROUP = "failures"
RUNS_GROUP = "runs"
LIVE_GPU_FIELDS = ("util_gpu", "util_mem", "mem_used_mib", "temp_c", "power_w", "sm_clock_mhz")


def node_group(node_id: int) -> str:
    return f"node.{node_id}"


def node_update(node_id: int, sample: NodeSample) -> dict[str, Any]:
    """The ``telemetry.node`` message: one node's newest sample, GPU by GPU."""
    gpus = [{"index": gpu.index, **{name: getattr(gpu, name) for name in LIVE_GPU_FIELDS}} for gpu in sample.gpus]
    return {"type": "telemetry.node", "node": node_id, "ts": sample.ts, "gpus": gpus}


HEAT_FIELDS = ("util", "power", "temp", "mem")  # a heatmap cell's values, in this order


class GpuReading(Protocol):
    """What a fleet entry reads of a GPU: a sample as the agent sent it, or a stored row's values."""

    @property
    def index(self) -> int: ...
    @property
    def util_gpu(self) -> float | None: ...
    @property
    def power_w(self) -> float | None: ...
    @property
    def temp_c(self) -> float | None: ...
    @property
    def mem_used_mib(self) -> int | None: ...


def heat_cell(gpu: GpuReading) -> list[int | None]:
    """One GPU's heatmap cell, ``HEAT_FIELDS`` in order: utilization %, power W, temperature °C and
    memory used GiB, in whole numbers, since a colour cannot show a tenth of a percent and every value
    that does not move is one the delta leaves out. (Written out: it runs for every GPU of every
    sample published and of every fleet snapshot, 8,000 times at 1,000 nodes.)"""
    util, power, temp, mem = gpu.util_gpu, gpu.power_w, gpu.temp_c, gpu.mem_used_mib
    return [
        None if util is None else round(util),
        None if power is None else round(power),
        None if temp is None else round(temp),
        None if mem is None else round(mem / 1024),
    ]


def heat_cells(gpus: Sequence[GpuReading]) -> list[list[int | None] | None]:
    """A node's cells by GPU index (null for an index that did not report): one short list, which a
    delta replaces whole. At 1,000 nodes that is ~130 bytes a node instead of ~360 as objects."""
    cells: list[list[int | None] | None] = [None] * (max((g.index for g in gpus), default=-1) + 1)
    for gpu in gpus:
        cells[gpu.index] = heat_cell(gpu)
    return cells


def fleet_entry(node_id: int, ts: float, gpus: Sequence[GpuReading]) -> dict[str, Any]:
    """One node's line in the ``telemetry.fleet`` message (its sample at ``ts``): its summary and its
    GPUs' heatmap cells. The fleet snapshot (apps/dashboard/streams.py) builds its entries with it too."""
    utils = [g.util_gpu for g in gpus if g.util_gpu is not None]
    powers = [g.power_w for g in gpus if g.power_w is not None]
    temps = [g.temp_c for g in gpus if g.temp_c is not None]
    return {
        "node": node_id,
        "ts": ts,
        "gpus": len(gpus),
        "util_gpu_mean": fmean(utils) if utils else None,
        "power_w_total": sum(powers) if powers else None,
        "temp_c_max": max(temps) if temps else None,
        "heat": heat_cells(gpus),
    }
