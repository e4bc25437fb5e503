"""apps/telemetry/links.py: each cabled node port's newest sample, if it is recent, joined to the
topology's nodes and summed per node and switch in the query that reads them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.inventory.choices import SwitchTier
from apps.inventory.topology import fabric_overview
from apps.telemetry.links import RECENT, link_loads
from apps.telemetry.models import LatestPortSample
from tests import factories

pytestmark = pytest.mark.django_db


def sample(node, device: str, at, tx: float | None, rate: float | None = 400.0) -> LatestPortSample:
    return LatestPortSample.objects.create(
        node_id=node.pk,
        ts=at,
        device=device,
        port=1,
        state="active",
        rate_gbps=rate,
        tx_gbps=tx,
        rx_gbps=1.0,
        received_at=at,
    )


def test_each_node_sums_its_cabled_ports_recent_samples_only(django_assert_num_queries):
    cluster = factories.cluster()
    fabric = factories.fabric(cluster)
    leaf, spine = factories.switch(fabric), factories.switch(fabric, SwitchTier.SPINE)
    factories.uplink(leaf, spine, count=2)
    node_type = factories.node_type(nics=4)
    busy, quiet = factories.node(cluster, node_type, "gpu-a"), factories.node(cluster, node_type, "gpu-b")
    for node in (busy, quiet):
        factories.cable_node_to_leaf(node, leaf)
    now = timezone.now()
    sample(busy, "mlx5_0", now - timedelta(seconds=1), tx=200.0)
    sample(busy, "mlx5_1", now - timedelta(seconds=1), tx=None, rate=None)  # no rate: the inventory's 400
    sample(busy, "mlx5_2", now - timedelta(seconds=1), tx=100.0, rate=0.0)  # a rate of 0: the inventory's too
    sample(busy, "mlx5_3", now - RECENT - timedelta(seconds=1), tx=300.0)  # too old to be "now"
    sample(busy, "mlx5_9", now, tx=400.0)  # a port not cabled to a switch
    sample(quiet, "mlx5_0", now - RECENT - timedelta(seconds=5), tx=50.0)

    with django_assert_num_queries(6):  # as many as without loads: they come in the nodes' query
        topology = fabric_overview(link_loads(now=now))

    [(_, [spine_view]), (_, [leaf_view])] = topology.fabrics[0].tiers
    gpu_a, gpu_b = leaf_view.nodes
    assert (gpu_a.load.tx_gbps, gpu_a.load.rx_gbps, gpu_a.load.rate_gbps, gpu_a.load.links) == (300.0, 3.0, 1200.0, 3)
    assert gpu_a.load.utilization == pytest.approx(300 / 1200)
    assert (gpu_a.links.up, gpu_a.links.total) == (4, 4)  # the join adds no port
    assert gpu_b.load.links == 0
    assert gpu_b.load.utilization is None  # nothing recent: unknown, not idle
    assert "no recent port sample" in gpu_b.summary
    assert leaf_view.load.utilization == pytest.approx(300 / 1200)
    assert spine_view.load.links == 0
