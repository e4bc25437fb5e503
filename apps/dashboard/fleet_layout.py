"""The fleet page's heatmap layout (its groups of nodes, by leaf switch) and colour-scale tops, held
by the server process as the JSON text the page embeds, instead of read and encoded for every page
view: three queries, a dict per node and ~80 KB of JSON at 1,000 nodes, for an answer that changes
when the inventory does, not every second. The prices in force for the fleet's node types and
clusters (apps/costs/rates.py ``live_pricing``, four queries) are held beside it: under a busy
server each query of a page view costs it tens of milliseconds, whatever the query.

A page view checks the text against the inventory's version, one aggregate over the nodes (how many,
the newest id, the newest change), and reads the layout again when they differ: a node added,
removed or changed shows on the next page load. What that version does not see (a port cabled to
another leaf, a GPU's memory, a power limit the telemetry reports, a price book's edit, the day's
change of prices) shows within ``max_age_s``.
"""

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from django.db.models import Count, Max
from django.utils import timezone

from apps.costs.rates import LivePricing, live_pricing
from apps.dashboard.fleet_mirror import script_json
from apps.inventory.models import Gpu, Node
from apps.telemetry.models import LatestGpuSample

NO_LEAF: Final = "No leaf switch known"
MAX_AGE_S: Final = 10.0
# Colour-scale tops when the fleet has not told us better (an H100 SXM's power limit and memory).
DEFAULT_POWER_MAX_W: Final = 700
DEFAULT_MEMORY_MAX_GIB: Final = 80


def heatmap_layout() -> list[dict[str, Any]]:
    """The heatmap's groups, by leaf switch then hostname: ``[{leaf, nodes: [{id, hostname, type,
    cluster, gpus}]}]``; nodes with no known leaf come last. Three queries."""
    leaves = Node.objects.leaf_names()
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    nodes = Node.objects.with_related().order_by("hostname")
    for node in nodes.values("id", "hostname", "node_type_id", "cluster_id", "gpu_count", "node_type__gpus_per_node"):
        groups[leaves.get(node["id"], NO_LEAF)].append(
            {
                "id": node["id"],
                "hostname": node["hostname"],
                "type": node["node_type_id"],
                "cluster": node["cluster_id"],
                "gpus": node["gpu_count"] or node["node_type__gpus_per_node"],
            }
        )
    return [{"leaf": leaf, "nodes": groups[leaf]} for leaf in sorted(groups, key=lambda leaf: (leaf == NO_LEAF, leaf))]


def scale_tops() -> dict[str, int]:
    """The top of the power and memory colour scales: the largest power limit and memory in the fleet."""
    limits = LatestGpuSample.objects.order_by().unpacked(("power_limit_w",))
    power = max((limit for _, gpus in limits for (limit,) in gpus if limit is not None), default=None)
    memory = Gpu.objects.aggregate(top=Max("memory_mib"))["top"]
    return {
        "power": round(power) if power else DEFAULT_POWER_MAX_W,
        "mem": round(memory / 1024) if memory else DEFAULT_MEMORY_MAX_GIB,
    }


def inventory_version() -> tuple[Any, ...]:
    """What changes when a node is added, removed or saved: one query."""
    return tuple(Node.objects.aggregate(nodes=Count("pk"), last=Max("pk"), changed=Max("updated_at")).values())


class FleetShell(NamedTuple):
    layout_json: str  # {layout, tops} as <script>-safe JSON text
    pricing: LivePricing


class FleetLayout:
    """The layout's text and the prices in force, read again when the inventory's version moved or
    they are older than ``max_age_s``. Pages of every thread share them."""

    def __init__(self, *, max_age_s: float = MAX_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._version: tuple[Any, ...] | None = None
        self._read_at = float("-inf")
        self._held: FleetShell | None = None
        self.reads = 0  # layouts read from the database

    def read(self) -> FleetShell:
        version = inventory_version()
        with self._lock:
            if self._held and version == self._version and self._clock() - self._read_at < self.max_age_s:
                return self._held
        # Read outside the lock: two pages that both found it old read it twice rather than one
        # waiting on the other's queries.
        held = FleetShell(
            script_json({"layout": heatmap_layout(), "tops": scale_tops()}), live_pricing(timezone.localdate())
        )
        with self._lock:
            self._version, self._read_at, self._held = version, self._clock(), held
            self.reads += 1
        return held


fleet_layout = FleetLayout()
