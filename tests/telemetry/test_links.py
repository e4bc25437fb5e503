"""apps/telemetry/links.py: each cabled node port's newest reading, if it is recent, in one query."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.inventory.topology import cabled_node_ports
from apps.telemetry.links import RECENT, latest_port_readings
from apps.telemetry.models import LatestPortSample
from tests import factories

pytestmark = pytest.mark.django_db


def sample(node, device: str, at, tx: float) -> LatestPortSample:
    return LatestPortSample.objects.create(
        node_id=node.pk,
        ts=at,
        device=device,
        port=1,
        state="active",
        rate_gbps=400.0,
        tx_gbps=tx,
        rx_gbps=1.0,
        received_at=at,
    )


def test_it_reads_the_newest_recent_sample_of_each_cabled_port(django_assert_num_queries):
    cluster = factories.cluster()
    leaf = factories.switch(factories.fabric(cluster))
    node = factories.node(cluster, factories.node_type(nics=3))
    factories.cable_node_to_leaf(node, leaf)
    now = timezone.now()
    sample(node, "mlx5_0", now - timedelta(seconds=1), tx=20.0)
    sample(node, "mlx5_1", now - RECENT - timedelta(seconds=1), tx=30.0)  # too old to be "now"
    sample(node, "mlx5_9", now, tx=40.0)  # a port not cabled to a switch

    with django_assert_num_queries(1):
        readings = latest_port_readings(cabled_node_ports(), now=now)

    assert readings == {(node.pk, "mlx5_0", 1): (20.0, 1.0, 400.0)}
