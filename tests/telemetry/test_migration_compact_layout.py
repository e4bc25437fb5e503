"""Migration 0008 carries today's wide tables into the compact layout: every raw sample, port sample and
rollup is still there, field for field, absent fields still absent; and going back gives them back."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agents.protocol import GpuSample, PortSample
from apps.telemetry.models import GPU_PACKING, PORT_PACKING, ROLLUP_FIELDS, ROLLUP_PACKING
from apps.telemetry.models.samples import unpack

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("telemetry", "0007_ingest_processes")]
AFTER = [("telemetry", "0008_compact_layout")]
AT = datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)  # two samples: either side of midnight
RECEIVED = AT + timedelta(seconds=5)


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def back_to_the_old_tables():
    apps = migrate(BEFORE)
    yield apps
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_it_keeps_every_sample_and_rollup(back_to_the_old_tables):
    old = back_to_the_old_tables
    times = (AT, AT + timedelta(seconds=2))
    old.get_model("telemetry", "GpuSample").objects.bulk_create(
        old.get_model("telemetry", "GpuSample")(
            node_id=7,
            ts=ts,
            received_at=RECEIVED,
            gpu_index=gpu,
            util_gpu=12.5 + gpu,
            power_w=650.125,
            ecc_uncorrected_volatile=gpu if gpu else None,
            retired_pages_pending=gpu == 1,
        )
        for ts in times
        for gpu in range(3)
    )
    old.get_model("telemetry", "PortSample").objects.create(
        node_id=7, ts=AT, received_at=RECEIVED, device="mlx5_0", port=1, state="active", tx_gbps=390.5, rcv_errors=3
    )
    for name in ("GpuMinuteRollup", "GpuHourRollup"):
        old.get_model("telemetry", name).objects.create(
            node_id=7,
            bucket=AT.replace(second=0),
            gpu_index=2,
            sample_count=60,
            util_gpu_min=10.0,
            util_gpu_mean=20.0,
            util_gpu_max=30.0,
        )

    new = migrate(AFTER)

    rows = list(new.get_model("telemetry", "NodeGpuSample").objects.order_by("ts"))
    assert [(row.node_id, row.ts, row.received_at) for row in rows] == [(7, ts, RECEIVED) for ts in times]
    assert unpack(GPU_PACKING, GpuSample, rows[0].gpus) == [
        GpuSample(index=0, util_gpu=12.5, power_w=650.125, retired_pages_pending=False),
        GpuSample(index=1, util_gpu=13.5, power_w=650.125, ecc_uncorrected_volatile=1, retired_pages_pending=True),
        GpuSample(index=2, util_gpu=14.5, power_w=650.125, ecc_uncorrected_volatile=2, retired_pages_pending=False),
    ]
    ports = new.get_model("telemetry", "NodePortSample").objects.get()
    assert unpack(PORT_PACKING, PortSample, ports.ports) == [
        PortSample(device="mlx5_0", port=1, state="active", tx_gbps=390.5, rcv_errors=3)
    ]
    for name in ("NodeMinuteRollup", "NodeHourRollup"):
        rollup = new.get_model("telemetry", name).objects.get()
        (item,) = ROLLUP_PACKING.unpack(rollup.gpus)
        stats = dict(zip(ROLLUP_FIELDS, item, strict=True))
        assert (stats["index"], stats["samples"], stats["util_gpu_n"]) == (2, 60, 60)
        assert (stats["util_gpu_min"], stats["util_gpu_sum"], stats["util_gpu_max"]) == (1000, 120_000, 3000)
        assert stats["power_w_n"] == 0
        assert stats["power_w_sum"] is None  # absent, not zero
        assert (rollup._gpus, rollup._util_gpu_total, rollup._util_gpu_samples) == (1, 1200.0, 60)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT DISTINCT tableoid::regclass::text FROM telemetry_nodegpusample ORDER BY 1")
            partitions = [name for (name,) in cursor.fetchall()]
        assert partitions == ["telemetry_nodegpusample_20261130", "telemetry_nodegpusample_20261201"]

    back = migrate(BEFORE)
    samples = back.get_model("telemetry", "GpuSample").objects.order_by("ts", "gpu_index")
    assert samples.count() == 6
    first = samples.first()
    assert (first.util_gpu, first.power_w, first.ecc_uncorrected_volatile, first.retired_pages_pending) == (
        12.5,
        650.125,
        None,
        False,
    )
    minute = back.get_model("telemetry", "GpuMinuteRollup").objects.get()
    assert (minute.sample_count, minute.util_gpu_min, minute.util_gpu_mean, minute.util_gpu_max) == (60, 10, 20, 30)
    assert minute.power_w_mean is None
