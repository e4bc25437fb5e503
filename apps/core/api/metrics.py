"""``GET /metrics``: every registered collector's families in the Prometheus text format (0.0.4).

``?cluster=<name>`` (repeatable) limits the export to those clusters' nodes: at 1,000 nodes one
response is about 300,000 lines, so a site with several clusters scrapes each as a target of its
own, and ``?nodes=0`` as one more: the control plane's own series (its ingest, connections refused
before a node was known), which belong to no cluster. A cluster that does not exist, or a ``nodes``
other than 0 or 1, is a 400 naming the parameter, so a typo in a scrape config shows as a failing
target rather than as an empty one.

Authentication: an API token (any role) in ``Authorization: Bearer``; Prometheus sends it with
``authorization: {credentials: ...}`` in its scrape config.
"""

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.metrics import Scrape, ScrapeError, registry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class PrometheusTextRenderer(BaseRenderer):
    media_type = "text/plain"
    format = "prometheus"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if isinstance(data, str):
            return data.encode()
        detail = data.get("detail", data) if isinstance(data, dict) else data
        return f"# {detail}\n".encode()  # an error (401, 403) as a comment a human can read


class _AlwaysText(BaseContentNegotiation):
    """Prometheus, curl and browsers all get the text format, whatever they put in Accept."""

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return parsers[0] if parsers else None


class MetricsView(APIView):
    renderer_classes = [PrometheusTextRenderer]
    content_negotiation_class = _AlwaysText

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        try:
            text = registry.render(_scrape(request))
        except ScrapeError as error:
            return Response(
                f"# {error.parameter}: {error}\n", status=status.HTTP_400_BAD_REQUEST, content_type=CONTENT_TYPE
            )
        return Response(text, content_type=CONTENT_TYPE)


def _scrape(request: Request) -> Scrape:
    clusters = frozenset(request.query_params.getlist("cluster"))
    nodes = request.query_params.get("nodes", "1")
    if nodes not in ("0", "1"):
        raise ScrapeError(
            "nodes", f"expected 0 (only the control plane's own series) or 1 (the default), not {nodes!r}."
        )
    if clusters and nodes == "0":
        raise ScrapeError("cluster", "a scrape without nodes' series (nodes=0) has none of a cluster.")
    return Scrape(timezone.now(), clusters, nodes=nodes == "1")
