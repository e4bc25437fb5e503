"""/metrics in tests: the registry's exposition parsed as Prometheus parses it, and a fleet with
something in every family."""

import time
from collections.abc import Callable

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agents.protocol import Events, GpuEvent, GpuSample, NodeSample, PortSample, Telemetry
from apps.core.metrics import Scrape, registry
from apps.failures.events import record_events
from apps.gateway.choices import CounterCode
from apps.gateway.models import GatewayCounter, NodeAgent
from apps.inventory.models import Cluster, Gpu, Node, NodeType, Rack
from apps.telemetry.events import store_events
from apps.telemetry.models import GPU_METRIC_FIELDS, GPU_PACKING, IngestProcess
from apps.telemetry.storage import Submission, write_batch
from tests import factories


def exposition(*clusters: str) -> str:
    """What /metrics answers now (limited to ``clusters``, if any)."""
    return registry.render(Scrape(timezone.now(), frozenset(clusters)))


def families(text: str) -> dict:
    """By name, and a counter under its samples' ``_total`` name too (the parser drops the suffix)."""
    parsed = {family.name: family for family in text_string_to_metric_families(text)}
    return parsed | {s.name: family for family in parsed.values() for s in family.samples}


def scrape(*clusters: str) -> dict:
    return families(exposition(*clusters))


def series(parsed: dict, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """Family ``name``'s samples by the values of the labels ``keys``."""
    return {tuple(s.labels.get(key, "") for key in keys): s.value for s in parsed[name].samples if s.name == name}


# A fleet with something in every family ------------------------------------------------------


def every_field_reported(index: int) -> GpuSample:
    kinds = {bool: False, float: 1.5}
    values = {f.name: kinds.get(f.kind, 1) for f in GPU_PACKING.fields if f.name in GPU_METRIC_FIELDS}
    return GpuSample(index=index, **values)


def every_counter_reported(device: str) -> PortSample:
    counters = dict.fromkeys(("symbol_errors", "link_downed", "rcv_errors", "tx_bytes", "rx_bytes"), 1)
    return PortSample(device=device, port=1, state="active", rate_gbps=400.0, tx_gbps=1.5, rx_gbps=1.5, **counters)


def busy_node(cluster: Cluster, node_type: NodeType, rack: Rack | None = None) -> Node:
    """A node with something in every family: fresh samples of 8 GPUs and 8 ports, an XID and the failure
    it opened, a frame the gateway refused, an agent that lost samples."""
    node = factories.node(cluster, node_type)
    Node.objects.filter(pk=node.pk).update(rack=rack)
    Gpu.objects.filter(node=node).update(memory_mib=81_559)
    sample = NodeSample(
        ts=time.time() - 1,
        gpus=[every_field_reported(i) for i in range(8)],
        ports=[every_counter_reported(f"mlx5_{i}") for i in range(8)],
    )
    write_batch([Submission(node.pk, Telemetry(seq=1, samples=[sample]))])
    xid = Events(seq=1, events=[GpuEvent(ts=time.time(), kind="xid", gpu_index=2, xid=79)])
    store_events(node.pk, xid)
    record_events(node.pk, xid)
    GatewayCounter.add({(node.pk, CounterCode.INVALID): (1, "NaN in power_w")}, timezone.now())
    NodeAgent.objects.create(node=node, buffered_samples=0, dropped_samples=2, buffer_reported_at=timezone.now())
    return node


def busy_fleet() -> Callable[..., None]:
    """Two clusters, h100-east (racked) and h100-west, a server process's ingest totals and a refused
    connection; the function returned adds a busy node to each cluster (or ``nodes`` of them)."""
    node_type = factories.node_type(nics=0)
    east, west = factories.cluster("h100-east"), factories.cluster("h100-west")
    rack = Rack.objects.create(cluster=east, name="r01")
    GatewayCounter.add({(None, CounterCode.UNAUTHORIZED): (1, "revoked credential")}, timezone.now())
    IngestProcess.objects.create(
        process="cp-1:100",
        updated_at=timezone.now(),
        messages=1,
        gpu_samples=8,
        port_samples=8,
        duplicates=0,
        failed_batches=0,
        pending_rows=0,
        lag_s=0.3,
        write_s=0.01,
    )

    def grow(nodes: int = 1) -> None:
        for _ in range(nodes):
            busy_node(east, node_type, rack)
            busy_node(west, node_type)

    return grow


def exported_names() -> set[str]:
    """The name of every family /metrics exports now, as its ``# TYPE`` line writes it."""
    return {line.split()[2] for line in exposition().splitlines() if line.startswith("# TYPE ")}
