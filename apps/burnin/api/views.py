"""Burn-ins over HTTP. Read: viewer. Start: operator; suites and thresholds: admin; the quarantine
breaker: an operator closes it (the person who decides), an admin sets its share and window. Every
change is audited; a burn-in's nodes, checks and verdicts are read-only, written by the judging."""

from django.db import IntegrityError
from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.api.viewsets import BaseModelViewSet
from apps.accounts.audit import describe
from apps.accounts.roles import Role
from apps.burnin import filtersets
from apps.burnin.api import serializers as s
from apps.burnin.models import BurnIn, BurnInCheck, BurnInNode, QuarantineBreaker, Suite, ThresholdVersion
from apps.burnin.quarantine import BreakerClosed, close
from apps.burnin.starting import CannotStart, start_burn_in
from apps.core.api.exceptions import Conflict


class BurnInViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Burn-ins, newest first, each with its nodes counted by state and outcome. Its run (``/runs/{id}``)
    has the commands and their progress; ``/burn-in-nodes?burn_in=`` the verdicts, ``/burn-in-checks`` each
    check's."""

    queryset = BurnIn.objects.with_counts()
    serializer_class = s.BurnInSerializer
    filterset_class = filtersets.BurnInFilterSet
    ordering_fields = ["created_at"]
    write_role = Role.OPERATOR

    @extend_schema(
        request=s.BurnInCreateSerializer,
        responses={
            201: s.BurnInSerializer,
            200: OpenApiResponse(s.BurnInSerializer, "The burn-in this idempotency key started."),
            400: OpenApiResponse(description="A field is wrong, or a node cannot start a burn-in now (in service)."),
        },
    )
    def create(self, request: Request) -> Response:
        """Start a burn-in of a suite on nodes, or on every node of a cluster that can start one. Each node
        moves into burn-in (nothing else is scheduled on it) and is judged when its steps are over: into
        service when it passes, quarantined with the failed checks as the reason when it fails."""
        body = s.BurnInCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        key = data["idempotency_key"]
        if key and (earlier := self._started_with(key)) is not None:
            return Response(self.get_serializer(earlier).data, status=status.HTTP_200_OK)
        try:
            burn_in = start_burn_in(
                data["nodes"],
                data["suite"],
                actor=request.user.get_username(),
                user=request.user,
                deadline=data["deadline_s"],
                cluster=data.get("cluster"),
                into_service=data["into_service"],
                idempotency_key=key,
            )
        except CannotStart as exc:
            raise ValidationError({"nodes": [str(exc)]}) from exc
        except IntegrityError:  # the same key, from a request at the same moment
            if key and (earlier := self._started_with(key)) is not None:
                return Response(self.get_serializer(earlier).data, status=status.HTTP_200_OK)
            raise
        describe(
            request,
            "burnin.start",
            burn_in,
            suite=data["suite"].name,
            nodes=[node.hostname for node in data["nodes"][:100]],
            node_count=len(data["nodes"]),
            run=burn_in.run_id,
        )
        return Response(self.get_serializer(self.get_queryset().get(pk=burn_in.pk)).data, status=201)

    def _started_with(self, key: str) -> BurnIn | None:
        return self.get_queryset().filter(run__idempotency_key=key).first()


class BurnInNodeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Each node of each burn-in: testing, passed or failed, what that did to its lifecycle and why, the
    threshold version it was judged by, and its checks."""

    queryset = BurnInNode.objects.select_related("node", "thresholds").prefetch_related(
        Prefetch("checks", queryset=BurnInCheck.objects.order_by("sequence"))
    )
    serializer_class = s.BurnInNodeSerializer
    filterset_class = filtersets.BurnInNodeFilterSet
    ordering_fields = ["judged_at"]


class BurnInCheckViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Each check of each node's burn-in, judged: every figure with the rule it was judged by."""

    queryset = BurnInCheck.objects.select_related("burn_in_node__node", "burn_in_node__thresholds")
    serializer_class = s.BurnInCheckSerializer
    filterset_class = filtersets.BurnInCheckFilterSet
    ordering_fields = ["sequence"]


class SuiteViewSet(BaseModelViewSet):
    """Burn-in suites: quick, standard and extended ship; admins add their own and edit any. A shipped
    suite cannot be deleted; one that burn-ins used cannot either (their record names it)."""

    queryset = Suite.objects.all()
    serializer_class = s.SuiteSerializer

    def perform_destroy(self, instance: Suite) -> None:
        if instance.builtin:
            raise Conflict(f"{instance} ships with the control plane and cannot be deleted; edit it instead.")
        super().perform_destroy(instance)


class ThresholdViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                       viewsets.GenericViewSet):  # fmt: skip
    """Threshold versions per node type, newest first. A version is never edited: publishing one (admin)
    numbers it after the node type's newest, and the burn-ins started from then on are judged by it."""

    queryset = ThresholdVersion.objects.select_related("node_type")
    serializer_class = s.ThresholdSerializer
    filterset_class = filtersets.ThresholdFilterSet

    def create(self, request: Request) -> Response:
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        version = ThresholdVersion.objects.publish(
            data["node_type"],
            rules=[dict(rule) for rule in data["rules"]],
            source=data["source"],
            note=data["note"],
            actor=request.user.get_username(),
        )
        describe(
            request, "burnin.thresholds.publish", version, node_type=version.node_type.name, version=version.version
        )
        return Response(self.get_serializer(version).data, status=status.HTTP_201_CREATED)


class BreakerViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin,
                     viewsets.GenericViewSet):  # fmt: skip
    """Each cluster's automatic-quarantine circuit breaker (``?cluster=<name>``): open or closed, why, and its
    latest openings and closings. An admin sets its share and window (``PATCH``); an operator closes it."""

    queryset = QuarantineBreaker.objects.select_related("cluster").prefetch_related("events")
    serializer_class = s.BreakerSerializer
    filterset_class = filtersets.BreakerFilterSet
    http_method_names = ["get", "patch", "post", "head", "options"]
    action_roles = {"close": Role.OPERATOR}

    def perform_update(self, serializer: s.BreakerSerializer) -> None:
        before = {"percent": serializer.instance.percent, "window_s": serializer.instance.window_s}
        breaker = serializer.save()
        describe(self.request, "quarantine_breaker.update", breaker.cluster, before=before,
                 after={"percent": breaker.percent, "window_s": breaker.window_s})  # fmt: skip

    @extend_schema(
        request=s.BreakerCloseSerializer,
        responses={200: s.BreakerSerializer, 409: OpenApiResponse(description="The breaker is not open.")},
    )
    @action(detail=True, methods=["post"])
    def close(self, request: Request, pk: str | None = None) -> Response:
        """Close the breaker: automatic quarantine resumes in the cluster, counting from now. With
        ``quarantine_withheld`` the nodes it held back are quarantined now, in your name."""
        breaker = self.get_object()
        body = s.BreakerCloseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        describe(request, "quarantine_breaker.close", breaker.cluster, reason=data["reason"])
        try:
            moved = close(
                breaker,
                actor=request.user.get_username(),
                user=request.user,
                reason=data["reason"],
                quarantine_withheld=data["quarantine_withheld"],
            )
        except BreakerClosed as exc:
            raise Conflict(str(exc)) from exc
        describe(request, "quarantine_breaker.close", quarantined=[node.hostname for node in moved])
        return Response(self.get_serializer(self.get_queryset().get(pk=breaker.pk)).data)
