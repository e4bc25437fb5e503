"""Rack elevations: each rack's nodes at their rack units, for the racks page. Two queries, whatever
the fleet's size.

The inventory knows a node's lowest unit (``rack_position``) but not its height, so a node is drawn
from its position up to the next node's, at most ``MAX_NODE_UNITS`` (an 8-GPU HGX/DGX server is
8 U; a larger gap is empty space). A rack is ``RACK_UNITS`` high, or higher when a node sits above.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from apps.inventory.models import Node, Rack

RACK_UNITS: Final = 42
MAX_NODE_UNITS: Final = 8


@dataclass
class RackedNode:
    id: int
    hostname: str
    lifecycle: str
    liveness: str
    power_limit_w: int  # its GPUs' default power limits together: the top of its power scale
    position: int | None
    units: int = 1
    row: int = 0  # first row of the rack's grid it spans, row 1 being the rack's top unit


@dataclass
class RackView:
    id: int
    name: str
    cluster: str
    location: str
    power_budget_kw: Decimal | None
    nodes: list[RackedNode] = field(default_factory=list)  # top of the rack first

    @property
    def top(self) -> int:
        """The rack's highest unit."""
        return max([RACK_UNITS] + [node.position + node.units - 1 for node in self.placed])

    @property
    def bottom(self) -> int:
        """Its lowest unit: 1, unless the inventory counts from 0."""
        return min([1] + [node.position for node in self.placed])

    @property
    def height(self) -> int:
        """Units from the bottom to the top: the rows of its grid."""
        return self.top - self.bottom + 1

    @property
    def labelled_units(self) -> list[tuple[int, int]]:
        """``(grid row, unit)`` of the units that carry a number on the rail: the first and every fifth."""
        return [
            (self.top - unit + 1, unit) for unit in range(self.top, self.bottom - 1, -1) if unit == 1 or unit % 5 == 0
        ]

    @property
    def placed(self) -> list[RackedNode]:
        return [node for node in self.nodes if node.position is not None]

    @property
    def unplaced(self) -> list[RackedNode]:
        """Nodes in the rack whose unit the inventory does not say."""
        return [node for node in self.nodes if node.position is None]


@dataclass
class RackLayout:
    racks: list[RackView]  # with nodes
    empty_racks: list[RackView]
    unracked: list[RackedNode]  # nodes in no rack

    @property
    def max_node_power_w(self) -> int:
        nodes = [node for rack in self.racks for node in rack.nodes] + self.unracked
        return max((node.power_limit_w for node in nodes), default=0)


def rack_elevations() -> RackLayout:
    """Every rack with its nodes placed at their units, the empty racks, and the nodes in no rack."""
    racks = {
        rack.pk: RackView(rack.pk, rack.name, rack.cluster.name, rack.location, rack.power_budget_kw)
        for rack in Rack.objects.select_related("cluster").order_by("cluster__name", "name")
    }
    unracked: list[RackedNode] = []
    by_rack: dict[int, list[RackedNode]] = defaultdict(list)
    rows = Node.objects.values_list(
        "id",
        "hostname",
        "lifecycle",
        "liveness",
        "node_type__gpus_per_node",
        "node_type__gpu_power_limit_w",
        "rack_id",
        "rack_position",
    ).order_by("hostname")
    for node_id, hostname, lifecycle, liveness, gpus, limit_w, rack_id, position in rows:
        node = RackedNode(node_id, hostname, lifecycle, liveness, gpus * limit_w, position)
        (by_rack[rack_id] if rack_id in racks else unracked).append(node)
    for rack_id, nodes in by_rack.items():
        rack = racks[rack_id]
        rack.nodes = place(nodes)
        for node in rack.placed:
            node.row = rack.top - (node.position + node.units - 1) + 1
    return RackLayout(
        racks=[rack for rack in racks.values() if rack.nodes],
        empty_racks=[rack for rack in racks.values() if not rack.nodes],
        unracked=unracked,
    )


def place(nodes: list[RackedNode]) -> list[RackedNode]:
    """Give each node its height (see the module's docstring); top of the rack first, unplaced last."""
    placed = sorted((node for node in nodes if node.position is not None), key=lambda node: node.position)
    next_positions = (
        [node.position for node in placed[1:]] + [max(RACK_UNITS, placed[-1].position) + 1] if placed else []
    )
    for node, next_position in zip(placed, next_positions, strict=True):
        node.units = max(1, min(MAX_NODE_UNITS, next_position - node.position))
    return placed[::-1] + [node for node in nodes if node.position is None]
