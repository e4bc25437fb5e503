"""The price book over HTTP: CRUD for prices (read: viewer, write: admin) and the computed
figures, each returned with its inputs. The arithmetic lives in apps.costs.rates."""

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.viewsets import BaseModelViewSet
from apps.costs import filtersets, rates
from apps.costs.api import serializers as s
from apps.costs.models import EnergyPrice, GpuPrice
from apps.inventory.models import Cluster

NO_PRICE = OpenApiResponse(description="No price in force on that date; the message says which periods the book has.")


class GpuPriceViewSet(BaseModelViewSet):
    queryset = GpuPrice.objects.select_related("node_type")
    serializer_class = s.GpuPriceSerializer
    filterset_class = filtersets.GpuPriceFilterSet
    ordering_fields = ["valid_from", "valid_to", "node_type__name", "kind"]


class EnergyPriceViewSet(BaseModelViewSet):
    queryset = EnergyPrice.objects.select_related("cluster")
    serializer_class = s.EnergyPriceSerializer
    filterset_class = filtersets.EnergyPriceFilterSet
    ordering_fields = ["valid_from", "valid_to", "cluster__name"]


def query_params(request: Request, serializer_class: type[serializers.Serializer]) -> dict:
    """The request's query parameters, validated: a bad or missing one is a 400 naming it."""
    query = serializer_class(data=request.query_params)
    query.is_valid(raise_exception=True)
    return {"at": timezone.localdate(), **query.validated_data}


class GpuHourCostView(APIView):
    """What one GPU-hour of a node type costs on a date, with the arithmetic and its inputs."""

    @extend_schema(parameters=[s.GpuHourQuerySerializer], responses={200: s.CostFigureSerializer, 404: NO_PRICE})
    def get(self, request: Request) -> Response:
        query = query_params(request, s.GpuHourQuerySerializer)
        try:
            figure = rates.hourly_gpu_cost(query["node_type"], query["at"])
        except rates.NoPriceInForce as exc:
            raise NotFound(str(exc)) from exc
        return Response(s.CostFigureSerializer(figure).data)


class EnergyHourCostView(APIView):
    """What an IT load costs per hour in a cluster on a date (kWh price × PUE × kW)."""

    @extend_schema(parameters=[s.EnergyHourQuerySerializer], responses={200: s.CostFigureSerializer, 404: NO_PRICE})
    def get(self, request: Request) -> Response:
        query = query_params(request, s.EnergyHourQuerySerializer)
        try:
            figure = rates.energy_cost_per_hour(query["cluster"], query["watts"], query["at"])
        except rates.NoPriceInForce as exc:
            raise NotFound(str(exc)) from exc
        return Response(s.CostFigureSerializer(figure).data)


class ClusterCostRateView(APIView):
    """What a cluster's GPU capacity costs per hour, per node type, at the prices in force on a date.

    Every node that is not retired counts: owned hardware costs money whatever its state, and a
    cloud provider bills quarantined and drained nodes too.
    """

    @extend_schema(parameters=[s.AtQuerySerializer], responses=s.ClusterCostRateSerializer)
    def get(self, request: Request, pk: int) -> Response:
        cluster = get_object_or_404(Cluster, pk=pk)
        query = query_params(request, s.AtQuerySerializer)
        return Response(s.ClusterCostRateSerializer(rates.cluster_cost_rate(cluster, query["at"])).data)
