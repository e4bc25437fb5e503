from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.inventory.models import Node
from apps.telemetry.api.serializers import FleetHistorySerializer, NodeTelemetrySerializer, TelemetryQuerySerializer
from apps.telemetry.queries import FLEET_HISTORY_SPAN, METRICS, WINDOWS, fleet_history, node_series


class NodeTelemetryView(APIView):
    """One node's GPU metric over the last 15 minutes, 24 hours or 30 days, as per-GPU series of
    (t, min, mean, max) points."""

    @extend_schema(
        parameters=[
            TelemetryQuerySerializer,
            OpenApiParameter("node", str, OpenApiParameter.PATH, description="The node's id or hostname."),
        ],
        responses=NodeTelemetrySerializer,
    )
    def get(self, request: Request, node: str) -> Response:
        query = TelemetryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        found = get_object_or_404(Node.objects.named(node).only("id", "hostname"))
        window, metric = WINDOWS[query.validated_data["window"]], query.validated_data["metric"]
        series = node_series(found.pk, window, metric, now=timezone.now())
        body = {
            "node": found.pk,
            "hostname": found.hostname,
            "window": window.name,
            "metric": metric,
            "unit": METRICS[metric],
            "source": window.source_name,
            **series,
        }
        return Response(body)  # NodeTelemetrySerializer documents it; thousands of points skip its per-field cost


class FleetHistoryView(APIView):
    """The whole fleet's utilization and power draw, minute by minute, over the last hour (from the
    minute rollups: the minutes still settling are not there yet)."""

    @extend_schema(responses=FleetHistorySerializer)
    def get(self, request: Request) -> Response:
        now = timezone.now()
        body = {"start": now - FLEET_HISTORY_SPAN, "end": now, "step_s": 60, "points": fleet_history(now=now)}
        return Response(FleetHistorySerializer(body).data)
