"""apps/inventory/racks.py: nodes placed at their rack units, with heights up to the next node."""

import pytest

from apps.inventory.models import Node, Rack
from apps.inventory.racks import RackedNode, place, rack_elevations
from tests import factories

pytestmark = pytest.mark.django_db


def racked(position: int | None) -> RackedNode:
    return RackedNode(
        id=position or 0, hostname=f"n{position}", lifecycle="", liveness="", power_limit_w=0, position=position
    )


def test_a_node_reaches_up_to_the_next_at_most_eight_units():
    nodes = [racked(p) for p in (2, 11, 14, 40, None)]
    assert [(n.position, n.units) for n in place(nodes)] == [(40, 3), (14, 8), (11, 3), (2, 8), (None, 1)]


def test_racks_are_drawn_top_unit_first_with_their_nodes_on_their_rows():
    cluster = factories.cluster()
    node_type = factories.node_type(nics=0, gpus=4)
    rack = Rack.objects.create(cluster=cluster, name="r01")
    Rack.objects.create(cluster=cluster, name="r02")
    for hostname, position in (("a", 2), ("b", 11), ("c", None)):
        node = factories.node(cluster, node_type, hostname)
        Node.objects.filter(pk=node.pk).update(rack=rack, rack_position=position)
    factories.node(cluster, node_type, "loose")

    layout = rack_elevations()

    [view] = layout.racks
    assert (view.top, view.bottom, view.height) == (42, 1, 42)
    assert view.labelled_units == [(3, 40), (8, 35), (13, 30), (18, 25), (23, 20), (28, 15), (33, 10), (38, 5), (42, 1)]
    assert [(n.hostname, n.units, n.row) for n in view.placed] == [("b", 8, 42 - 18 + 1), ("a", 8, 42 - 9 + 1)]
    assert [n.hostname for n in view.unplaced] == ["c"]
    assert [r.name for r in layout.empty_racks] == ["r02"]
    assert [n.hostname for n in layout.unracked] == ["loose"]
    assert layout.max_node_power_w == 4 * 700


def test_it_costs_two_queries(django_assert_num_queries):
    cluster = factories.cluster()
    rack = Rack.objects.create(cluster=cluster, name="r01")
    node_type = factories.node_type(nics=0)
    for position in range(1, 40, 8):
        Node.objects.filter(pk=factories.node(cluster, node_type).pk).update(rack=rack, rack_position=position)
    with django_assert_num_queries(2):
        rack_elevations()
