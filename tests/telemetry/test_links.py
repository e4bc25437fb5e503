"""apps/telemetry/links.py: each cabled node port's newest sample, if it is recent, joined to the
topology's nodes and summed per node and switch in the query that reads them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.inventory.choices import SwitchTier
from apps.inventory.topology import fabric_overview
from apps.telemetry.links import RECENT, link_loads
from tests import factories

pytestmark = pytest.mark.django_db


def port(device: str, tx: float | None, rate: float | None = 400.0) -> dict:
    return dict(device=device, port=1, state="active", rate_gbps=rate, tx_gbps=tx, rx_gbps=1.0)


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
    recent = [
        port("mlx5_0", tx=200.0),
        port("mlx5_1", tx=None, rate=None),  # no rate: the inventory's 400
        port("mlx5_2", tx=100.0, rate=0.0),  # a rate of 0: the inventory's too
        port("mlx5_9", tx=400.0),  # a port not cabled to a switch
    ]  # mlx5_3 is not in the newest sample: no reading
    factories.latest_ports(busy, now - timedelta(seconds=1), recent)
    factories.latest_ports(quiet, now - RECENT - timedelta(seconds=5), [port("mlx5_0", tx=50.0)])  # too old to be "now"

    with django_assert_num_queries(7):  # the loads' (a row per node), and the overview's six as without them
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
