"""What the telemetry pipeline hands to apps.failures: each new events message (the gateway's sinks
store it and raise its failures in one transaction), and (through the ``TelemetryStored`` event the
telemetry watch subscribes to) each GPU's counters compared with its previous sample. A replayed
duplicate raises nothing twice."""

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from agents.protocol import Events, GpuEvent, GpuSample, NodeSample, Telemetry
from apps.failures.models import Failure
from apps.gateway.sinks import store_events
from apps.telemetry.ingest import Ingestor
from tests.telemetry.conftest import T0


def xid_message(seq: int, code: int, gpu: int = 3) -> Events:
    return Events(seq=seq, events=[GpuEvent(ts=T0, kind="xid", gpu_index=gpu, xid=code, data=f"Xid {code}")])


@pytest.mark.django_db
def test_a_new_events_message_raises_its_failures_and_a_replay_does_not(make_node):
    node = make_node()
    assert store_events(node.pk, xid_message(1, 79)) == 1
    assert store_events(node.pk, xid_message(1, 79)) == 1  # the same frame again after a reconnect
    failure = Failure.objects.get(node=node)
    assert (failure.xid, failure.gpu_index, failure.count) == (79, 3, 1)


def ecc_sample(ts: float, uncorrected: int) -> NodeSample:
    return NodeSample(ts=ts, gpus=[GpuSample(index=2, util_gpu=90.0, ecc_uncorrected_volatile=uncorrected)])


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_rising_uncorrected_ecc_count_in_stored_samples_raises_a_failure(make_node):
    node = await sync_to_async(make_node)()
    ingestor = Ingestor(flush_interval_s=0.05)
    try:
        await ingestor.submit(node.pk, Telemetry(seq=1, samples=[ecc_sample(T0, 0), ecc_sample(T0 + 1, 0)]))
        assert not await sync_to_async(Failure.objects.filter(node=node).exists)()
        await ingestor.submit(node.pk, Telemetry(seq=2, samples=[ecc_sample(T0 + 2, 4)]))
        await ingestor.submit(node.pk, Telemetry(seq=2, samples=[ecc_sample(T0 + 2, 4)]))  # replayed
        failures = await sync_to_async(list)(
            Failure.objects.filter(node=node).values_list("kind", "gpu_index", "count")
        )
        assert failures == [("ecc", 2, 1)]
    finally:
        await ingestor.shutdown()
        await sync_to_async(connections.close_all)()
