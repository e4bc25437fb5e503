"""The README's promise for ``make demo``: gpu-009's scripted overheating opens a thermal failure within
three minutes of the fleet's start. The demo's own fault script and profile, the simulated collector,
the gateway's discovery, the telemetry ingest and the telemetry watch it feeds: the path a demo
fleet's samples take, on the simulated clock."""

from datetime import UTC, datetime

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from agents.protocol import Telemetry
from agents.simulator.collector import SimulatedCollector
from apps.failures.models import Failure
from apps.gateway.discovery import apply_inventory
from apps.telemetry.ingest import Ingestor
from controlplane import demo
from tests import factories

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
PROMISED_S = 180
FRAME_S = 30  # samples per telemetry frame, as an agent that was briefly away would send them


def gpu_009():
    node = factories.node(factories.cluster(), factories.node_type(nics=8), "gpu-009")
    collector = SimulatedCollector(demo.FLEET_PROFILE, "gpu-009", seed=demo.FLEET_SEED, faults=demo.FLEET_FAULTS)
    apply_inventory(node, collector.discover())  # as the node's agent reports it: GPUs, slowdown thresholds
    return node, collector


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_gpu_009_overheats_into_a_thermal_failure_within_three_minutes_of_the_demo_fleet_starting():
    node, collector = await sync_to_async(gpu_009)()
    ingestor = Ingestor(flush_interval_s=0.01)
    try:
        for seq, first in enumerate(range(0, PROMISED_S, FRAME_S), start=1):
            samples = [collector.sample(START + second) for second in range(first, first + FRAME_S)]
            await ingestor.submit(node.pk, Telemetry(seq=seq, samples=samples))
        failures = await sync_to_async(list)(
            Failure.objects.filter(node=node).values_list("code", "gpu_index", "first_seen")
        )
    finally:
        await ingestor.shutdown()
        await sync_to_async(connections.close_all)()

    [(code, gpu_index, first_seen)] = failures
    assert (code, gpu_index) == ("thermal", 6)
    assert first_seen.timestamp() - START < PROMISED_S
