"""Builders for telemetry messages shaped like what the agent sends."""

import pytest

from agents.protocol import GpuSample, NodeSample, PortSample, Telemetry
from apps.inventory.models import Node
from tests import factories

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


def gpu_sample(index: int, *, util: float = 50.0, power: float = 400.0, **fields: object) -> GpuSample:
    values = {"util_gpu": util, "util_mem": util / 2, "mem_used_mib": 40_000, "temp_c": 60.0, "power_w": power}
    values.update(fields)
    return GpuSample(index=index, sm_clock_mhz=1980, **values)


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
