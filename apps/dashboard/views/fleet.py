from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.db.models import Max
from django.http import HttpResponse, StreamingHttpResponse
from django.utils import timezone

from apps.costs.rates import live_pricing
from apps.dashboard import streams
from apps.dashboard.fleet_mirror import script_json
from apps.dashboard.live_streams import live_streams
from apps.dashboard.views.base import DashboardPage
from apps.dashboard.views.runs import running_runs
from apps.failures.models import Failure
from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Gpu, Node
from apps.telemetry.models import LatestGpuSample

NO_LEAF = "No leaf switch known"
SNAPSHOT_MARK: Final = "<!-- the fleet's snapshot, sent after the shell -->"
RECENT_FAILURES = 15
# Colour-scale tops when the fleet has not told us better (an H100 SXM's power limit and memory).
DEFAULT_POWER_MAX_W = 700
DEFAULT_MEMORY_MAX_GIB = 80


async def streamed(shell: str, counts: dict[str, dict[str, int]], rest: str) -> AsyncIterator[str]:
    """The page: its shell, then the fleet's snapshot, then the rest (the scripts at its end)."""
    yield shell
    snapshot = live_streams.fleet.snapshot_json(counts)
    if snapshot is None:  # on the request's own thread (Django gives each request one), now idle
        snapshot = await sync_to_async(lambda: script_json(streams.fleet_snapshot()), thread_sensitive=True)()
    yield f'<script id="fleet-snapshot" type="application/json">{snapshot}</script>'
    yield rest


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
    power = LatestGpuSample.objects.aggregate(top=Max("power_limit_w"))["top"]
    memory = Gpu.objects.aggregate(top=Max("memory_mib"))["top"]
    return {
        "power": round(power) if power else DEFAULT_POWER_MAX_W,
        "mem": round(memory / 1024) if memory else DEFAULT_MEMORY_MAX_GIB,
    }


class FleetPage(DashboardPage):
    """The fleet overview. The page's shell goes out first, its data after: the fleet stream's snapshot
    in a <script> element, which the heatmap is drawn from as soon as the page's worker has it, not
    after a WebSocket round trip (the socket's own snapshot follows and replaces it). The snapshot is
    the one the process holds (apps/dashboard/fleet_mirror.py, started with the server's lifespan),
    read from the database only when it has none that agrees with the database's node counts, and
    then after the shell is on its way."""

    nav = "fleet"
    template_name = "dashboard/fleet.html"

    def render_to_response(self, context: dict[str, Any], **kwargs: Any) -> HttpResponse:
        if not context["node_total"]:
            return super().render_to_response(context, **kwargs)
        shell, rest = super().render_to_response(context, **kwargs).rendered_content.split(SNAPSHOT_MARK)
        return StreamingHttpResponse(
            streamed(shell, context["state_counts"], rest), content_type="text/html; charset=utf-8"
        )

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        counts = Node.objects.state_counts()
        pricing = live_pricing(timezone.localdate())
        recent = Failure.objects.with_related().alarms().order_by("-last_seen")[:RECENT_FAILURES]
        return super().get_context_data(**kwargs) | {
            "node_total": sum(counts["lifecycle"].values()),
            "lifecycle_counts": [(state, counts["lifecycle"].get(state.value, 0)) for state in Lifecycle],
            "liveness_counts": [(state, counts["liveness"].get(state.value, 0)) for state in Liveness],
            "recent_failures": recent,
            "runs": running_runs(),
            "pricing": pricing,
            "state_counts": counts,
            "snapshot_mark": SNAPSHOT_MARK,
            "fleet_page": {
                "layout": heatmap_layout(),
                "tops": scale_tops(),
                "pricing": {
                    "currency": pricing.currency,
                    "gpu_hour": {str(k): float(v) for k, v in pricing.gpu_hour.items()},
                    "kw_hour": {str(k): float(v) for k, v in pricing.kw_hour.items()},
                    "unpriced": pricing.unpriced,
                },
            },
        }
