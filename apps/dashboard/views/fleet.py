import time
from collections.abc import AsyncIterator
from typing import Any, Final

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from apps.dashboard import streams
from apps.dashboard.fleet_layout import fleet_layout
from apps.dashboard.fleet_mirror import script_json
from apps.dashboard.live_streams import live_streams
from apps.dashboard.views.base import DashboardPage
from apps.dashboard.views.runs import running_runs
from apps.failures.models import Failure
from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Node

SNAPSHOT_MARK: Final = "<!-- the fleet's snapshot, sent after the shell -->"
RECENT_FAILURES = 15


async def streamed(shell: str, counts: dict[str, dict[str, int]], rest: str) -> AsyncIterator[str]:
    """The page: its shell, then the fleet's snapshot, then the rest (the scripts at its end)."""
    yield shell
    snapshot = live_streams.fleet.snapshot_json(counts)
    if snapshot is None:  # on the request's own thread (Django gives each request one), now idle
        snapshot = await sync_to_async(lambda: script_json(streams.fleet_snapshot()), thread_sensitive=True)()
    yield f'<script id="fleet-snapshot" type="application/json">{snapshot}</script>'
    yield rest


class FleetPage(DashboardPage):
    """The fleet overview. The page's shell goes out first, its data after: the fleet stream's snapshot
    in a <script> element, which the heatmap is drawn from as soon as the page's worker has it, not
    after a WebSocket round trip (the socket's own snapshot follows and replaces it). The snapshot is
    the one the process holds (apps/dashboard/fleet_mirror.py, started with the server's lifespan),
    read from the database only when it has none that agrees with the database's node counts, and
    then after the shell is on its way. The shell's heatmap layout and the prices in force are held
    too (apps/dashboard/fleet_layout.py): a page view reads neither again while the inventory stands."""

    nav = "fleet"
    template_name = "dashboard/fleet.html"

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        started = time.perf_counter()
        response = super().dispatch(request, *args, **kwargs)
        # The browser's Navigation Timing reads it (benchmarks/dashboard.py): the server's share of
        # the time to the first byte, apart from the time the request waited for the server.
        response["Server-Timing"] = f"shell;dur={(time.perf_counter() - started) * 1000:.1f}"
        return response

    def render_to_response(self, context: dict[str, Any], **kwargs: Any) -> HttpResponse:
        if not context["node_total"]:
            return super().render_to_response(context, **kwargs)
        shell, rest = super().render_to_response(context, **kwargs).rendered_content.split(SNAPSHOT_MARK)
        return StreamingHttpResponse(
            streamed(shell, context["state_counts"], rest), content_type="text/html; charset=utf-8"
        )

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        counts = Node.objects.state_counts()
        shell = fleet_layout.read()
        pricing = shell.pricing
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
            "fleet_layout": shell.layout_json,
            "fleet_page": {
                "pricing": {
                    "currency": pricing.currency,
                    "gpu_hour": {str(k): float(v) for k, v in pricing.gpu_hour.items()},
                    "kw_hour": {str(k): float(v) for k, v in pricing.kw_hour.items()},
                    "unpriced": pricing.unpriced,
                },
            },
        }
