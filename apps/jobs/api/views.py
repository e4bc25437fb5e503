"""Runs and commands over HTTP. Read: viewer. Start and cancel: operator, each audited. A run is
started by writing it (and its commands) and queueing its start; the response is the run as written."""

from django.db import IntegrityError, transaction
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.audit import describe
from apps.accounts.roles import Role
from apps.core.api.exceptions import Conflict
from apps.jobs import filtersets
from apps.jobs.api import serializers as s
from apps.jobs.models import Command, CommandLogLine, IllegalRunChange, Run

OVER = OpenApiResponse(description="It is over already; the message says how it ended.")


class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Runs, newest first, each with its commands counted by state and its progress. A run is a set of
    commands, one per node and step; ``/commands?run=`` lists them, ``/runs/{id}/logs`` their log lines."""

    queryset = Run.objects.with_counts()
    serializer_class = s.RunSerializer
    filterset_class = filtersets.RunFilterSet
    ordering_fields = ["created_at", "finished_at"]
    write_role = Role.OPERATOR

    @extend_schema(
        request=s.RunCreateSerializer,
        responses={201: s.RunSerializer, 200: OpenApiResponse(s.RunSerializer, "The run this idempotency key made.")},
    )
    def create(self, request: Request) -> Response:
        """Start a run: every node takes every step, in order. Its commands wait for nodes that are
        offline, and expire at the deadline with the reason."""
        body = s.RunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        key = data["idempotency_key"]
        if key and (earlier := self.get_queryset().filter(idempotency_key=key).first()) is not None:
            return Response(self.get_serializer(earlier).data, status=status.HTTP_200_OK)
        try:
            with transaction.atomic():
                run = Run.objects.launch(
                    nodes=data["nodes"],
                    steps=data["steps"],
                    deadline=data["deadline_s"],
                    actor=request.user.get_username(),
                    user=request.user,
                    title=data["title"],
                    idempotency_key=key,
                )
        except IntegrityError:  # the same key, from a request running at the same moment
            if key and (earlier := self.get_queryset().filter(idempotency_key=key).first()) is not None:
                return Response(self.get_serializer(earlier).data, status=status.HTTP_200_OK)
            raise
        describe(
            request,
            "run.create",
            run,
            nodes=[node.hostname for node in data["nodes"][:100]],
            node_count=len(data["nodes"]),
            steps=[step.check for step in data["steps"]],
        )
        return Response(self.get_serializer(self.get_queryset().get(pk=run.pk)).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.CancelRequestSerializer, responses={200: s.RunSerializer, 409: OVER})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel the run: what waits ends at once; what agents run is stopped there (its process group
        killed), and what they had is kept."""
        run = self.get_object()
        body = s.CancelRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        describe(request, "run.cancel", run, from_state=run.state, reason=body.validated_data["reason"])
        try:
            cancelled = run.cancel(actor=request.user.get_username(), reason=body.validated_data["reason"])
        except IllegalRunChange as exc:
            raise Conflict(str(exc)) from exc
        describe(request, "run.cancel", commands_cancelled=len(cancelled))
        return Response(self.get_serializer(self.get_queryset().get(pk=run.pk)).data)

    @extend_schema(parameters=[s.LogQuerySerializer], responses=s.LogLineSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """The log lines of the run's commands, in order; ``?after=`` the last id seen, to follow it."""
        run = self.get_object()
        query = s.LogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        lines = (
            CommandLogLine.objects.filter(command__run=run, pk__gt=query.validated_data["after"])
            .select_related("command__node")
            .order_by("pk")[: query.validated_data["limit"]]
        )
        return Response(s.LogLineSerializer(lines, many=True).data)


class CommandViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Commands: one node's step of a run, with its state, attempts, progress and, in the detail, the
    check's result and the end of its output."""

    queryset = Command.objects.select_related("node")
    serializer_class = s.CommandSerializer
    filterset_class = filtersets.CommandFilterSet
    ordering_fields = ["sent_at", "finished_at", "sequence"]
    write_role = Role.OPERATOR

    def get_serializer_class(self) -> type[s.CommandSerializer]:
        return s.CommandDetailSerializer if self.action in ("retrieve", "cancel") else s.CommandSerializer

    @extend_schema(request=s.CancelRequestSerializer, responses={200: s.CommandDetailSerializer, 409: OVER})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel this node's command; the rest of its run goes on."""
        command = self.get_object()
        body = s.CancelRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        describe(request, "command.cancel", command, from_state=command.state, reason=body.validated_data["reason"])
        try:
            command.cancel(actor=request.user.get_username(), reason=body.validated_data["reason"])
        except IllegalRunChange as exc:
            raise Conflict(str(exc)) from exc
        return Response(self.get_serializer(self.get_queryset().get(pk=command.pk)).data)
