"""apps/inventory/topology.py: each fabric's switches by tier, the nodes under each switch, link
states, and load from port readings, in a fixed number of queries."""

import pytest

from apps.inventory.choices import FabricKind, FabricTopology, LinkState, SwitchTier
from apps.inventory.models import Fabric, NetworkPort
from apps.inventory.topology import LinkLoad, fabric_overview, natural_key
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    return factories.cluster("east")


def test_a_link_is_as_busy_as_its_busier_direction():
    load = LinkLoad()
    load.add(300.0, 100.0, 400)
    assert (load.utilization, load.percent) == (0.75, 75)
    load.add(None, 300.0, 400)  # a port that reported no tx counts as idle that way
    assert load.utilization == pytest.approx(max(300 + 0, 100 + 300) / 800)  # 0.5
    assert LinkLoad().utilization is None  # nothing reported: unknown, not idle


def test_switches_come_highest_tier_first_and_in_natural_order(cluster):
    fabric = factories.fabric(cluster)
    for name, tier in (("leaf-10", SwitchTier.LEAF), ("leaf-9", SwitchTier.LEAF), ("spine-1", SwitchTier.SPINE)):
        fabric.switches.create(name=name, tier=tier)
    [view] = fabric_overview().fabrics
    assert [(tier, [s.name for s in switches]) for tier, switches in view.tiers] == [
        ("Spine", ["spine-1"]),
        ("Leaf", ["leaf-9", "leaf-10"]),
    ]
    assert natural_key("gpu-2") < natural_key("gpu-10")


def test_nodes_sit_under_their_leaf_with_their_link_states(cluster):
    fabric = factories.fabric(cluster)
    leaf, spine = factories.switch(fabric), factories.switch(fabric, SwitchTier.SPINE)
    factories.uplink(leaf, spine, count=3)
    node_type = factories.node_type(nics=3)
    up, half_down = factories.node(cluster, node_type, "gpu-a"), factories.node(cluster, node_type, "gpu-b")
    factories.cable_node_to_leaf(up, leaf)
    factories.cable_node_to_leaf(half_down, leaf)
    NetworkPort.objects.filter(node=half_down, device_name="mlx5_2").update(link_state=LinkState.DOWN)
    NetworkPort.objects.filter(node=half_down, device_name="mlx5_0").update(link_state=LinkState.UNKNOWN)
    loner = factories.node(cluster, node_type, "gpu-c")

    topology = fabric_overview()

    [(_, [spine_view]), (_, [leaf_view])] = topology.fabrics[0].tiers
    assert [(n.hostname, n.links.up, n.links.down, n.links.unknown) for n in leaf_view.nodes] == [
        ("gpu-a", 3, 0, 0),
        ("gpu-b", 1, 1, 1),
    ]
    gpu_a, gpu_b = leaf_view.nodes
    assert (gpu_a.links.gbps, gpu_a.not_up) == (1200, [])
    assert gpu_b.not_up == ["mlx5_0/1: unknown", "mlx5_2/1: down"]
    assert "mlx5_2/1: down" in gpu_b.summary
    assert gpu_a.load.utilization is None  # no readings asked for: unknown, not idle
    assert (leaf_view.node_links.up, leaf_view.node_links.down, leaf_view.node_links.gbps) == (4, 1, 2400)
    assert (leaf_view.uplinks.total, leaf_view.uplinks.unknown, leaf_view.uplinks.gbps) == (3, 3, 1200)
    assert (spine_view.downlinks.total, spine_view.nodes) == (3, [])
    assert topology.uncabled == [(loner.pk, "gpu-c")]


def test_a_node_cabled_to_two_leaves_sits_under_each_with_the_ports_cabled_there(cluster):
    fabric = factories.fabric(cluster)
    rail_0, rail_1 = factories.switch(fabric), factories.switch(fabric)
    node = factories.node(cluster, factories.node_type(nics=2), "gpu-a")
    for port, leaf in zip(node.ports.order_by("device_name"), (rail_0, rail_1), strict=True):
        port.link_state = LinkState.DOWN if leaf == rail_1 else LinkState.ACTIVE
        port.save(update_fields=["link_state"])
        factories.cable(port, leaf.ports.create(name="p1", rate_gbps=port.rate_gbps))

    [(_, leaves)] = fabric_overview().fabrics[0].tiers

    by_switch = {leaf.id: [(n.hostname, n.links.up, n.links.down, n.not_up) for n in leaf.nodes] for leaf in leaves}
    assert by_switch == {rail_0.pk: [("gpu-a", 1, 0, [])], rail_1.pk: [("gpu-a", 0, 1, ["mlx5_1/1: down"])]}


def test_each_switch_sums_the_readings_of_the_ports_cabled_to_it(cluster):
    fabric = factories.fabric(cluster)
    rail_0, rail_1 = factories.switch(fabric), factories.switch(fabric)
    node = factories.node(cluster, factories.node_type(nics=2, rate_gbps=400), "gpu-a")
    for port, leaf in zip(node.ports.order_by("device_name"), (rail_0, rail_1), strict=True):
        factories.cable(port, leaf.ports.create(name="p1", rate_gbps=port.rate_gbps))
    loads = {
        (node.pk, "mlx5_0", 1): (100.0, 50.0, None),  # no rate: the inventory's 400
        (node.pk, "mlx5_1", 1): (None, 300.0, 200.0),
        (node.pk, "mlx5_7", 1): (999.0, 999.0, 400.0),  # a port the inventory does not cable
    }

    [(_, leaves)] = fabric_overview(loads).fabrics[0].tiers

    by_switch = {leaf.id: leaf.nodes[0].load for leaf in leaves}
    assert by_switch == {rail_0.pk: LinkLoad(100.0, 50.0, 400.0, 1), rail_1.pk: LinkLoad(0.0, 300.0, 200.0, 1)}


def test_an_nvlink_fabric_counts_its_clusters_links(cluster):
    Fabric.objects.create(name="nvl", cluster=cluster, kind=FabricKind.NVLINK, topology=FabricTopology.NVSWITCH)
    node = factories.node(cluster, factories.node_type(nics=0, gpus=4))
    factories.nvlink_mesh(node)
    [view] = fabric_overview().fabrics
    assert (view.nvlinks.up, view.nvlinks.total, view.tiers) == (6, 6, [])


def test_it_costs_six_queries_whatever_the_fleet(cluster, django_assert_num_queries):
    fabric = factories.fabric(cluster)
    leaf = factories.switch(fabric)
    node_type = factories.node_type(nics=2)
    for _ in range(3):
        factories.cable_node_to_leaf(factories.node(cluster, node_type), leaf)
    with django_assert_num_queries(6):
        fabric_overview()
