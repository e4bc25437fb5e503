import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api import serializers as s
from apps.accounts.api.viewsets import BaseModelViewSet
from apps.accounts.audit import describe
from apps.accounts.models import ApiToken, AuditLogEntry, User
from apps.accounts.permissions import request_role
from apps.accounts.roles import Role
from apps.core.api.filters import BooleanFilter, FilterSet


class UserViewSet(BaseModelViewSet):
    queryset = User.objects.all().order_by("username")
    serializer_class = s.UserSerializer
    read_role = Role.ADMIN
    audit_redacted_fields = frozenset({"password"})
    filterset_fields = ["role", "is_active", "username"]
    ordering_fields = ["username", "date_joined", "last_login"]
    http_method_names = [
        "get",
        "post",
        "patch",
        "head",
        "options",
    ]  # deactivate, don't delete: the audit log refers to users


class ApiTokenFilterSet(FilterSet):
    usable = BooleanFilter(
        method="filter_usable", label="Tokens that authenticate now (true) or that no longer do (false)"
    )

    class Meta:
        model = ApiToken
        fields = ["user", "role"]

    def filter_usable(self, queryset: QuerySet[ApiToken], name: str, value: bool | None) -> QuerySet[ApiToken]:
        if value is None:
            return queryset
        usable = ApiToken.objects.usable().values("pk")
        return queryset.filter(pk__in=usable) if value else queryset.exclude(pk__in=usable)


class ApiTokenViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Tokens for automation. The secret is returned once, by create; only its digest is kept."""

    queryset = ApiToken.objects.select_related("user")
    serializer_class = s.ApiTokenSerializer
    read_role = Role.ADMIN
    write_role = Role.ADMIN
    filterset_class = ApiTokenFilterSet

    @extend_schema(responses={201: s.IssuedApiTokenSerializer})
    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        token, secret = ApiToken.issue(
            user=data["user"], name=data["name"], role=data["role"], expires_at=data.get("expires_at")
        )
        describe(request, "api_token.create", token, owner=token.user.username, role=token.role)
        body = s.IssuedApiTokenSerializer(token, context=self.get_serializer_context()).data
        body["token"] = secret
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        token = self.get_object()
        token.revoke()
        describe(request, "api_token.revoke", token, owner=token.user.username)
        return Response(self.get_serializer(token).data)


class AuditLogFilterSet(FilterSet):
    since = django_filters.IsoDateTimeFilter(field_name="timestamp", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="timestamp", lookup_expr="lt")
    action_prefix = django_filters.CharFilter(field_name="action", lookup_expr="startswith")

    class Meta:
        model = AuditLogEntry
        fields = ["actor", "user", "action", "object_type", "object_id", "status_code", "method"]


class AuditLogViewSet(viewsets.ReadOnlyModelViewSet):
    """Every state-changing request and command. Operators read it to see who did what."""

    queryset = AuditLogEntry.objects.all()
    serializer_class = s.AuditLogEntrySerializer
    read_role = Role.OPERATOR
    filterset_class = AuditLogFilterSet
    ordering_fields = ["timestamp"]


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer, summary="Who the caller is and the role it acts with")
    def get(self, request: Request) -> Response:
        return Response(s.MeSerializer(request.user, context={"effective_role": request_role(request)}).data)
