"""The topology page (fabrics, switches by tier, the nodes under each leaf, link state and load) and
the racks page (rack elevations coloured by each node's live power or temperature)."""

from typing import Any

from django.utils import timezone

from apps.dashboard.views.base import DashboardPage
from apps.inventory.models import Node
from apps.inventory.racks import MAX_NODE_UNITS, rack_elevations
from apps.inventory.topology import fabric_overview
from apps.telemetry.links import RECENT, link_loads

# The temperature scale of the racks page, °C: an idle GPU sits near the bottom, one that is slowing
# down to protect itself (H100: from about 87 °C) at the top.
TEMPERATURE_SCALE_C = (25, 90)


class TopologyPage(DashboardPage):
    nav = "topology"
    template_name = "dashboard/topology.html"

    def get_template_names(self) -> list[str]:
        return ["dashboard/_topology_fabrics.html" if "partial" in self.request.GET else self.template_name]

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        topology = fabric_overview(link_loads(now=timezone.now()))
        return super().get_context_data(**kwargs) | {
            "topology": topology,
            "recent_s": int(RECENT.total_seconds()),
            "has_nodes": Node.objects.exists(),
        }


class RacksPage(DashboardPage):
    nav = "racks"
    template_name = "dashboard/racks.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        layout = rack_elevations()
        return super().get_context_data(**kwargs) | {
            "layout": layout,
            "max_node_units": MAX_NODE_UNITS,
            "racks_page": {
                "scales": {"power": [0, layout.max_node_power_w], "temp": list(TEMPERATURE_SCALE_C)},
            },
        }
