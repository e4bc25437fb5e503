"""Failures and straggler flags over HTTP. Read: viewer. Acknowledge and resolve: operator, each a
state change on the failure that lands in the audit log; one its state forbids is a 409 saying why.
A failure's node can be moved (quarantined, drained, ...) with the failure as the reason: the role
that move needs, and a 409 when the node's state does not allow it."""

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.audit import describe
from apps.accounts.permissions import request_role
from apps.accounts.roles import Role, role_rank
from apps.core.api.exceptions import Conflict
from apps.failures import advice, filtersets, reliability
from apps.failures import xid as catalog
from apps.failures.api import serializers as s
from apps.failures.models import Failure, IllegalFailureTransition, StragglerFlag
from apps.inventory.actions import Move
from apps.inventory.api.serializers import NodeSerializer
from apps.inventory.api.views import carry_out_or_refuse
from apps.inventory.models import Node

ILLEGAL_TRANSITION = OpenApiResponse(description="The failure's state does not allow it; the message says why.")


class FailureViewSet(viewsets.ReadOnlyModelViewSet):
    """Failures, newest sighting first. ``?open=true`` is the feed: open or acknowledged, side effects
    left out. Failures are opened by the control plane itself (agent events, telemetry, liveness,
    stragglers), never through the API; people acknowledge and resolve them."""

    queryset = Failure.objects.with_related()
    serializer_class = s.FailureSerializer
    filterset_class = filtersets.FailureFilterSet
    ordering_fields = ["last_seen", "first_seen", "count"]
    action_roles = {"acknowledge": Role.OPERATOR, "resolve": Role.OPERATOR, "node_action": Role.OPERATOR}

    @extend_schema(request=None, responses={200: s.FailureSerializer, 409: ILLEGAL_TRANSITION})
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str | None = None) -> Response:
        """Someone is on it: the failure stays in the feed, marked acknowledged."""
        failure = self.get_object()
        describe(request, "failure.acknowledge", failure, from_state=failure.state)
        try:
            failure.acknowledge(actor=request.user.get_username(), user=request.user)
        except IllegalFailureTransition as exc:
            raise Conflict(str(exc)) from exc
        return Response(self.get_serializer(self.get_queryset().get(pk=failure.pk)).data)

    @extend_schema(request=s.ResolveRequestSerializer, responses={200: s.FailureSerializer, 409: ILLEGAL_TRANSITION})
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, pk: str | None = None) -> Response:
        """Fixed: the failure leaves the feed with its side effects; the next sighting opens a new one."""
        failure = self.get_object()
        body = s.ResolveRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        note = body.validated_data.get("note", "").strip()
        describe(request, "failure.resolve", failure, from_state=failure.state, note=note)
        try:
            side_effects = failure.resolve(actor=request.user.get_username(), user=request.user, note=note)
        except IllegalFailureTransition as exc:
            raise Conflict(str(exc)) from exc
        describe(request, "failure.resolve", side_effects_resolved=side_effects)
        return Response(self.get_serializer(self.get_queryset().get(pk=failure.pk)).data)

    @extend_schema(
        request=s.NodeActionRequestSerializer,
        responses={200: NodeSerializer, 409: OpenApiResponse(description="The node's state does not allow it.")},
        summary="Move the failure's node, with this failure as the reason",
    )
    @action(detail=True, methods=["post"], url_path="node-action", url_name="node-action")
    def node_action(self, request: Request, pk: str | None = None) -> Response:
        """Quarantine, drain, burn in or retire the node the failure is on; the reason recorded in the
        node's lifecycle history and the audit log is the failure itself (and the note, if any)."""
        failure = self.get_object()
        body = s.NodeActionRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        move = s.FAILURE_ACTIONS[body.validated_data["action"]]
        if role_rank(request_role(request)) < role_rank(move.role):
            raise PermissionDenied(f"{move.label} needs the {move.role} role.")
        note = body.validated_data.get("note", "").strip()
        reason = advice.as_reason(failure) + (f": {note}" if note else "")
        node = failure.node
        describe(
            request,
            f"node.{move.name}",
            node,
            reason=reason,
            from_state=node.lifecycle,
            to_state=move.target,
            failure=failure.pk,
        )
        done = carry_out_or_refuse(move, Move(node, request.user.get_username(), request.user, reason, {}))
        describe(request, f"node.{move.name}", **done)
        return Response(NodeSerializer(Node.objects.with_related().get(pk=node.pk)).data)


class StragglerFlagViewSet(viewsets.ReadOnlyModelViewSet):
    """GPUs below their siblings and nodes below their type's fleet, under load. ``?active=true``:
    the current ones; cleared flags stay as history."""

    queryset = StragglerFlag.objects.select_related("node")
    serializer_class = s.StragglerFlagSerializer
    filterset_class = filtersets.StragglerFlagFilterSet
    ordering_fields = ["last_flagged", "first_flagged", "deviation"]


class XidCatalogView(APIView):
    """The XID catalog the control plane judges failures by."""

    @extend_schema(responses=s.XidEntrySerializer(many=True), summary="Every XID the catalog lists")
    def get(self, request: Request) -> Response:
        return Response(s.XidEntrySerializer(catalog.CATALOG.values(), many=True).data)


class XidEntryView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("code", OpenApiTypes.INT, OpenApiParameter.PATH)],
        responses=s.XidEntrySerializer,
        summary="One XID: its entry, or the generic one for an XID the catalog does not list",
    )
    def get(self, request: Request, code: int) -> Response:
        if not 1 <= code <= 1000:
            raise Http404(f"XID {code} is out of range (1 to 1000).")
        return Response(s.XidEntrySerializer(catalog.lookup(code)).data)


class ReliabilityView(APIView):
    """How often the fleet fails over the last ``days`` days: failures per GPU-year by GPU model and by
    kind, mean time between failures per node, the worst nodes, each with the exposure it rests on and
    ``low_exposure`` where that is too little to mean much. A failure is an alarm first seen in the
    period (side effects are part of their cause's incident); GPU-years are each GPU's time in the
    fleet during the period, in years. docs/failures.md has the definitions."""

    @extend_schema(
        parameters=[s.ReliabilityQuerySerializer],
        responses=s.ReliabilitySerializer,
        summary="Failures per GPU-year and MTBF over a period",
    )
    def get(self, request: Request) -> Response:
        query = s.ReliabilityQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(s.ReliabilitySerializer(reliability.reliability(query.validated_data["days"])).data)
