"""Migration 0010 packs each node's newest GPU and port rows into one row per node: every reading is
still there, field for field, absent fields still absent, at the node's newest time; going back
gives one row per GPU and port again."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agents.protocol import GpuSample, PortSample
from apps.telemetry.models import GPU_PACKING, PORT_PACKING
from apps.telemetry.models.samples import unpack
from tests.telemetry.test_migration_compact_layout import migrate

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("telemetry", "0009_cursor_seq_before")]
AFTER = [("telemetry", "0010_latest_per_node")]
AT = datetime(2026, 12, 2, 12, 0, 0, 250_000, tzinfo=UTC)
RECEIVED = AT + timedelta(seconds=1)


@pytest.fixture
def wide_tables():
    apps = migrate(BEFORE)
    yield apps
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_it_packs_each_nodes_newest_readings_and_unpacks_them_going_back(wide_tables):
    old = wide_tables
    wide_gpu, wide_port = old.get_model("telemetry", "LatestGpuSample"), old.get_model("telemetry", "LatestPortSample")
    wide_gpu.objects.bulk_create(
        wide_gpu(
            node_id=node_id,
            gpu_index=gpu,
            ts=AT - timedelta(seconds=gpu),  # GPU 0's is the node's newest
            received_at=RECEIVED,
            util_gpu=50.5 + gpu,
            power_w=650.125,
            throttle_reasons=None if gpu else 4,
            remapped_rows_failed=gpu == 1,
        )
        for node_id in (7, 8)
        for gpu in range(3)
    )
    wide_port.objects.create(
        node_id=7, ts=AT, received_at=RECEIVED, device="mlx5_0", port=1, state="active", tx_gbps=390.5, rx_bytes=2**40
    )

    new = migrate(AFTER)

    gpus = {row.node_id: row for row in new.get_model("telemetry", "LatestGpuSample").objects.all()}
    assert sorted(gpus) == [7, 8]
    assert (gpus[7].ts, gpus[7].received_at) == (AT, RECEIVED)
    assert unpack(GPU_PACKING, GpuSample, gpus[7].gpus) == [
        GpuSample(index=0, util_gpu=50.5, power_w=650.125, throttle_reasons=4, remapped_rows_failed=False),
        GpuSample(index=1, util_gpu=51.5, power_w=650.125, remapped_rows_failed=True),
        GpuSample(index=2, util_gpu=52.5, power_w=650.125, remapped_rows_failed=False),
    ]
    port = new.get_model("telemetry", "LatestPortSample").objects.get()
    assert unpack(PORT_PACKING, PortSample, port.ports) == [
        PortSample(device="mlx5_0", port=1, state="active", tx_gbps=390.5, rx_bytes=2**40)
    ]

    back = migrate(BEFORE)

    rows = back.get_model("telemetry", "LatestGpuSample").objects.filter(node_id=7).order_by("gpu_index")
    assert [(r.gpu_index, r.ts, r.util_gpu, r.throttle_reasons, r.remapped_rows_failed) for r in rows] == [
        (0, AT, 50.5, 4, False),
        (1, AT, 51.5, None, True),
        (2, AT, 52.5, None, False),
    ]  # at the node's newest time: the sample they were packed into
    wide = back.get_model("telemetry", "LatestPortSample").objects.get()
    assert (wide.device, wide.tx_gbps, wide.rx_bytes, wide.symbol_errors) == ("mlx5_0", 390.5, 2**40, None)
