from typing import Any, TypeVar

from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.viewsets import BaseModelViewSet
from apps.accounts.audit import describe
from apps.accounts.permissions import request_role
from apps.accounts.roles import Role, role_rank
from apps.core.api.exceptions import Conflict
from apps.inventory import filtersets
from apps.inventory.actions import LIFECYCLE_ACTIONS, InvalidOption, LifecycleAction, Move, carry_out
from apps.inventory.api import serializers as s
from apps.inventory.bandwidth import theoretical_busbw
from apps.inventory.choices import Lifecycle
from apps.inventory.models import (
    Cluster,
    Fabric,
    Gpu,
    IllegalTransition,
    Link,
    LinkTermination,
    NetworkPort,
    Node,
    NodeTransition,
    NodeType,
    NvLink,
    PortTemplate,
    Rack,
    ReasonRequired,
    Switch,
    SwitchPort,
)
from apps.inventory.topology import nvlink_matrix, trace_hops


class ClusterViewSet(BaseModelViewSet):
    queryset = Cluster.objects.all()
    serializer_class = s.ClusterSerializer
    filterset_class = filtersets.ClusterFilterSet
    ordering_fields = ["name", "created_at"]


class NodeTypeViewSet(BaseModelViewSet):
    queryset = NodeType.objects.all()
    serializer_class = s.NodeTypeSerializer
    filterset_class = filtersets.NodeTypeFilterSet
    ordering_fields = ["name", "gpu_model"]


class PortTemplateViewSet(BaseModelViewSet):
    queryset = PortTemplate.objects.all()
    serializer_class = s.PortTemplateSerializer
    filterset_fields = ["node_type", "kind"]


class RackViewSet(BaseModelViewSet):
    queryset = Rack.objects.select_related("cluster")
    serializer_class = s.RackSerializer
    filterset_class = filtersets.RackFilterSet
    ordering_fields = ["name"]


def burn_in_override(request: Request, target: Lifecycle, asked: bool) -> bool:
    """Whether the request may and does ask to return a node to service without a burn-in: an
    admin's call, and only for that move (anything else asking is a 400 or a 403 saying so)."""
    if not asked:
        return False
    if target != Lifecycle.IN_SERVICE:
        raise ValidationError({"override_burn_in": ["Only returning to service takes a burn-in override."]})
    if role_rank(request_role(request)) < role_rank(Role.ADMIN):
        raise PermissionDenied("Overriding the burn-in needs the admin role.")
    return True


def carry_out_or_refuse(lifecycle: LifecycleAction, move: Move, *, override_burn_in: bool = False) -> dict[str, Any]:
    """``carry_out``, its refusals as the API gives them: a 400 naming the field a body lacks or has
    wrong, a 409 for a move the node cannot make now."""
    try:
        return carry_out(lifecycle, move, override_burn_in=override_burn_in)
    except ReasonRequired as exc:
        raise ValidationError({"reason": [str(exc)]}) from exc
    except InvalidOption as exc:
        raise ValidationError({exc.field: [str(exc)]}) from exc
    except IllegalTransition as exc:
        raise Conflict(str(exc)) from exc


def lifecycle_action(lifecycle: LifecycleAction) -> object:
    """A POST action that moves a node to the action's target."""
    name, target = lifecycle.name, lifecycle.target

    def perform(self: "NodeViewSet", request: Request, pk: str | None = None) -> Response:
        node = self.get_object()
        body = s.TransitionRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        reason, asked = data.get("reason", ""), data["override_burn_in"]
        detail = {"override_burn_in": True} if asked else {}
        describe(request, f"node.{name}", node, reason=reason, from_state=node.lifecycle, to_state=target, **detail)
        override = burn_in_override(request, target, asked)
        options = {"suite": data["suite"]} if "suite" in data else {}
        move = Move(node, request.user.get_username(), request.user, reason, options)
        done = carry_out_or_refuse(lifecycle, move, override_burn_in=override)
        describe(request, f"node.{name}", **done)
        if done.get("burn_in_override"):  # the audit log names an override as such
            describe(request, "node.burn_in_override")
        return Response(s.NodeSerializer(self.get_queryset().get(pk=node.pk)).data)

    perform.__name__ = name  # DRF routes an action by its function's name
    route = action(detail=True, methods=["post"], url_path=name.replace("_", "-"), url_name=name.replace("_", "-"))
    refusal = (
        "Refused with 409 and an explanation when the state machine does not allow it, or when a node would "
        "return to service without a burn-in passed since it last left service (an admin may override with "
        "a reason: ``override_burn_in``)."
    )
    if lifecycle.performed_elsewhere:
        summary = f"{lifecycle.label} of the node (suite quick unless ``suite`` names another)"
        refusal = "Starts a real burn-in, as ``POST /api/v1/burn-ins`` does; the node moves into burn-in. " + refusal
    else:
        summary = f"Move the node to {target.label.lower()}"
    schema = extend_schema(
        request=s.TransitionRequestSerializer, responses={200: s.NodeSerializer}, summary=summary, description=refusal
    )
    return schema(route(perform))


V = TypeVar("V", bound=type[BaseModelViewSet])


def with_lifecycle_actions(viewset: V) -> V:
    """Give the viewset one action per entry of LIFECYCLE_ACTIONS (the roles are its ``action_roles``)."""
    for lifecycle in LIFECYCLE_ACTIONS:
        setattr(viewset, lifecycle.name, lifecycle_action(lifecycle))
    return viewset


@with_lifecycle_actions
class NodeViewSet(BaseModelViewSet):
    queryset = Node.objects.with_related()
    serializer_class = s.NodeSerializer
    filterset_class = filtersets.NodeFilterSet
    ordering_fields = ["hostname", "lifecycle", "liveness", "last_seen_at", "created_at", "rack_position"]
    action_roles = {lifecycle.name: lifecycle.role for lifecycle in LIFECYCLE_ACTIONS}
    lookup_value_regex = "[^/]+"  # an id or a hostname, which may have dots

    def get_object(self) -> Node:
        """``/nodes/12`` or ``/nodes/gpu-007``: by id or by hostname."""
        node = get_object_or_404(self.filter_queryset(self.get_queryset().named(self.kwargs["pk"])))
        self.check_object_permissions(self.request, node)
        return node

    @extend_schema(responses=s.NodeTransitionSerializer(many=True), summary="Lifecycle history, newest first")
    @action(detail=True, methods=["get"], filter_backends=[])
    def history(self, request: Request, pk: str | None = None) -> Response:
        return self.page(self.get_object().transitions.select_related("node"), s.NodeTransitionSerializer)

    @extend_schema(responses=s.NvLinkMatrixSerializer, summary="NVLink matrix (nvidia-smi topo -m)")
    @action(detail=True, methods=["get"], url_path="nvlink-matrix")
    def nvlink_matrix(self, request: Request, pk: str | None = None) -> Response:
        return Response(nvlink_matrix(self.get_object()))

    @extend_schema(responses=s.NodeSerializer(many=True), summary="Other nodes under the same leaf switch")
    @action(detail=True, methods=["get"], filter_backends=[])
    def siblings(self, request: Request, pk: str | None = None) -> Response:
        siblings = Node.objects.with_related().filter(pk__in=self.get_object().siblings_under_leaf().values("pk"))
        return self.page(siblings, s.NodeSerializer)


class NodeTransitionViewSet(BaseModelViewSet):
    queryset = NodeTransition.objects.select_related("node")
    serializer_class = s.NodeTransitionSerializer
    filterset_class = filtersets.NodeTransitionFilterSet
    http_method_names = ["get", "head", "options"]


class GpuViewSet(BaseModelViewSet):
    queryset = Gpu.objects.select_related("node")
    serializer_class = s.GpuSerializer
    filterset_class = filtersets.GpuFilterSet
    ordering_fields = ["node__hostname", "index", "uuid", "state"]


class NetworkPortViewSet(BaseModelViewSet):
    queryset = NetworkPort.objects.select_related("node", "_peer_switch_port__switch")
    serializer_class = s.NetworkPortSerializer
    filterset_class = filtersets.NetworkPortFilterSet
    ordering_fields = ["node__hostname", "device_name", "port_num", "rate_gbps", "link_state"]

    # A path of a few hops, in order: one array, not pages.
    @extend_schema(responses=s.TraceHopSerializer(many=True), summary="Trace the port's path up the fabric")
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def trace(self, request: Request, pk: str | None = None) -> Response:
        return Response(trace_hops(self.get_object()))


class FabricViewSet(BaseModelViewSet):
    queryset = Fabric.objects.all()
    serializer_class = s.FabricSerializer
    filterset_class = filtersets.FabricFilterSet
    ordering_fields = ["name", "kind"]


class SwitchViewSet(BaseModelViewSet):
    queryset = Switch.objects.select_related("fabric")
    serializer_class = s.SwitchSerializer
    filterset_class = filtersets.SwitchFilterSet
    ordering_fields = ["name", "tier"]

    @extend_schema(responses=s.NodeSerializer(many=True), summary="Nodes cabled to this switch")
    @action(detail=True, methods=["get"], filter_backends=[])
    def nodes(self, request: Request, pk: str | None = None) -> Response:
        nodes = Node.objects.with_related().filter(pk__in=Node.objects.under_switch(self.get_object()).values("pk"))
        return self.page(nodes, s.NodeSerializer)


class SwitchPortViewSet(BaseModelViewSet):
    queryset = SwitchPort.objects.select_related("switch")
    serializer_class = s.SwitchPortSerializer
    filterset_class = filtersets.SwitchPortFilterSet
    ordering_fields = ["switch__name", "name"]


class LinkViewSet(BaseModelViewSet):
    # The ends are joined, not prefetched level by level: Django 5.2 prefetches a forward foreign key
    # with one OR term per row, which SQLite refuses past ~1,000 rows ("Expression tree is too large").
    queryset = Link.objects.prefetch_related(
        Prefetch(
            "terminations",
            queryset=LinkTermination.objects.select_related("network_port__node", "switch_port__switch"),
        )
    )
    serializer_class = s.LinkSerializer
    filterset_class = filtersets.LinkFilterSet


class NvLinkViewSet(BaseModelViewSet):
    queryset = NvLink.objects.select_related("_node", "gpu_a", "gpu_b")
    serializer_class = s.NvLinkSerializer
    filterset_class = filtersets.NvLinkFilterSet


class BusBandwidthView(APIView):
    """Theoretical all-reduce bus bandwidth of a set of nodes, from the fabric's slowest link."""

    @extend_schema(parameters=[s.BusBandwidthQuerySerializer], responses=s.BusBandwidthSerializer)
    def get(self, request: Request) -> Response:
        query = s.BusBandwidthQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(theoretical_busbw(query.validated_data["nodes"]).as_dict())
