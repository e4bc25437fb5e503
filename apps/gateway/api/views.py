from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.viewsets import BaseModelViewSet
from apps.accounts.audit import address_key, client_address, describe, record
from apps.accounts.roles import Role
from apps.accounts.throttle import enrollment_address_policy, lockout, record_failure
from apps.core.api.exceptions import Conflict
from apps.gateway import filtersets, push
from apps.gateway.api import serializers as s
from apps.gateway.enrollment import EnrollmentRefused, enroll
from apps.gateway.models import DiscoveryChange, EnrollmentToken, GatewayCounter, NodeAgent, NodeCredential
from apps.gateway.seqs import reset_seqs

READ_ONLY = ["get", "head", "options"]
# The same answer for every refusal: a caller cannot tell a guessed token from a used or expired one.
ENROLLMENT_REFUSED = "Enrollment refused: the token is invalid, expired, revoked, already used, or not for this host."


class EnrollmentTokenViewSet(BaseModelViewSet):
    """One-time tokens that let an agent enroll a node. The secret is returned once, by create."""

    queryset = EnrollmentToken.objects.select_related("created_by", "used_by_node")
    serializer_class = s.EnrollmentTokenSerializer
    filterset_class = filtersets.EnrollmentTokenFilterSet
    ordering_fields = ["created_at", "expires_at", "hostname"]
    read_role = Role.ADMIN
    http_method_names = ["get", "post", "head", "options"]

    @extend_schema(responses={201: s.IssuedEnrollmentTokenSerializer})
    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, secret = EnrollmentToken.issue(created_by=request.user, **serializer.validated_data)
        describe(
            request,
            "enrollment_token.create",
            token,
            hostname=token.hostname,
            cluster=token.cluster_id,
            expires_at=token.expires_at.isoformat(),
        )
        body = s.IssuedEnrollmentTokenSerializer(self.reloaded(token), context=self.get_serializer_context()).data
        body["token"] = secret
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.EnrollmentTokenSerializer, summary="Revoke an unused token")
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        token = self.get_object()
        if token.used_at is not None:
            raise Conflict(f"The token was used by {token.used_by_node}; revoke that node's credential instead.")
        token.revoke()
        describe(request, "enrollment_token.revoke", token, hostname=token.hostname)
        return Response(self.get_serializer(token).data)


class NodeCredentialViewSet(BaseModelViewSet):
    """Node credentials, created by enrollment. Revoking one also closes the agent's live socket."""

    queryset = NodeCredential.objects.select_related("node", "enrollment_token")
    serializer_class = s.NodeCredentialSerializer
    filterset_class = filtersets.NodeCredentialFilterSet
    ordering_fields = ["created_at", "last_seen_at"]
    read_role = Role.ADMIN
    http_method_names = READ_ONLY

    @extend_schema(request=None, responses=s.NodeCredentialSerializer, summary="Revoke, closing the live socket")
    @action(detail=True, methods=["post"], http_method_names=["post", "options"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        credential = self.get_object()
        if credential.revoke():
            push.credential_revoked(credential.node_id, credential.pk)
        describe(request, "node_credential.revoke", credential, hostname=credential.node.hostname)
        return Response(self.get_serializer(credential).data)


class NodeAgentViewSet(BaseModelViewSet):
    """What each node's agent last reported about itself, and whether it is connected."""

    queryset = NodeAgent.objects.select_related("node")
    serializer_class = s.NodeAgentSerializer
    filterset_fields = ["simulated", "agent_version"]
    ordering_fields = ["node__hostname", "connected_at", "inventory_at"]
    http_method_names = READ_ONLY

    @extend_schema(
        request=s.SeqResetSerializer,
        responses=s.SeqResetResultSerializer,
        summary="Reset the node's stored seqs (admin), closing its live socket",
    )
    @action(detail=True, methods=["post"], url_path="reset-seqs", http_method_names=["post", "options"])
    def reset_seqs(self, request: Request, pk: str | None = None) -> Response:
        """Where the server's dedup stands for the node (a frame at or below it is a replay) is set to the
        given seqs, 0 unless said: a repair for a node whose telemetry is acked but no longer stored."""
        node = self.get_object().node
        body = s.SeqResetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        after = {"telemetry": body.validated_data["telemetry_seq"], "events": body.validated_data["events_seq"]}
        before = reset_seqs(node, after["telemetry"], after["events"])
        describe(request, "node.seqs_reset", node, before=before, after=after, reason=body.validated_data["reason"])
        result = {"node": node.pk, "hostname": node.hostname, "before": before, "after": after}
        return Response(s.SeqResetResultSerializer(result).data)


class DiscoveryChangeViewSet(BaseModelViewSet):
    """What discovery found changed on the nodes: GPUs added, removed or swapped, ports, host facts."""

    queryset = DiscoveryChange.objects.select_related("node")
    serializer_class = s.DiscoveryChangeSerializer
    filterset_class = filtersets.DiscoveryChangeFilterSet
    ordering_fields = ["at"]
    http_method_names = READ_ONLY


class GatewayCounterViewSet(BaseModelViewSet):
    """How often the gateway refused a frame or a connection, per node and error code."""

    queryset = GatewayCounter.objects.select_related("node")
    serializer_class = s.GatewayCounterSerializer
    filterset_class = filtersets.GatewayCounterFilterSet
    ordering_fields = ["count", "last_at"]
    http_method_names = READ_ONLY


class EnrollView(APIView):
    """An agent exchanges its one-time enrollment token for a node credential. The token is the authentication.

    An address whose enrollments were refused ``ENROLLMENT_FAILURES_PER_ADDRESS`` times within
    ``ENROLLMENT_LOCKOUT_MINUTES`` is refused (429, Retry-After) for that long before any token is
    looked at (apps/accounts/throttle.py); successful enrollments never count, so a fleet enrolling
    from behind one address is not slowed."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=s.EnrollRequestSerializer,
        responses={
            201: s.EnrollResponseSerializer,
            403: OpenApiResponse(description=ENROLLMENT_REFUSED),
            429: OpenApiResponse(description="Too many refused enrollments from this address; see Retry-After."),
        },
        summary="Enroll a node's agent",
        auth=[],
    )
    def post(self, request: Request) -> Response:
        now, address = timezone.now(), client_address(request)
        locked = lockout(enrollment_address_policy(), address_key(address), now)
        if locked:
            describe(request, "agent.enroll_throttled")
            wait = locked.retry_after_s(now)
            return Response({"detail": locked.message(now)}, status=429, headers={"Retry-After": str(wait)})
        body = s.EnrollRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        hostname = body.validated_data["hostname"]
        try:
            enrollment = enroll(body.validated_data["token"], hostname, agent=body.agent_fields())
        except EnrollmentRefused as exc:
            record_failure(enrollment_address_policy(), address_key(address), now)
            describe(request, "agent.enroll_request", exc.token, hostname=hostname, refused=exc.reason)
            raise PermissionDenied(ENROLLMENT_REFUSED) from exc
        node, credential = enrollment.node, enrollment.credential
        record(
            "agent.enroll",
            actor=f"agent:{hostname}",
            obj=node,
            enrollment_token=enrollment.token.key_id,
            credential=credential.key_id,
            created_node=enrollment.created_node,
            revoked_credentials=enrollment.revoked_credentials,
            previous_seqs=enrollment.previous_seqs,
            remote_addr=address,
        )
        describe(request, "agent.enroll_request", node, hostname=hostname, credential=credential.key_id)
        response = {
            "node_id": node.pk,
            "hostname": node.hostname,
            "credential": enrollment.secret,
            "server_ws_url": settings.AGENT_WS_URL or _own_ws_url(request),
        }
        return Response(s.EnrollResponseSerializer(response).data, status=status.HTTP_201_CREATED)


def _own_ws_url(request: Request) -> str:
    return request.build_absolute_uri("/ws/agent").replace("http", "ws", 1)
