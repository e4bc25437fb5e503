"""The one base class every API viewset builds on (compare NetBox's netbox/api/viewsets): role
checks, atomic writes, and an audit description of every change.

It lives here rather than in apps/core because what it adds to DRF is this app's: the roles
(RolePermission reads ``read_role``, ``write_role`` and ``action_roles``) and the audit log
(``describe``). apps/core stays the bottom layer, importing no other app; the domain apps' API
views build on this class, as they already check roles and audit through this app.
"""

from typing import Any

from django.db import models, transaction
from django.db.models import ProtectedError
from rest_framework import serializers, viewsets
from rest_framework.response import Response

from apps.accounts.audit import changed_fields, describe, field_values, redact
from apps.core.api.exceptions import Conflict


class BaseModelViewSet(viewsets.ModelViewSet):
    """Reads need ``read_role`` (viewer), writes ``write_role`` (admin); see RolePermission.

    Writes run in one transaction, so a failure leaves nothing half-written, and each one is
    described for the audit log with the fields it changed.
    """

    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]
    # Fields the audit log names but never shows (a password hash is readable by every operator there).
    audit_redacted_fields: frozenset[str] = frozenset()

    @property
    def audit_name(self) -> str:
        return self.get_queryset().model._meta.model_name

    def audit_fields(self, obj: models.Model) -> dict[str, Any]:
        return redact(field_values(obj), self.audit_redacted_fields)

    def page(self, queryset: models.QuerySet, serializer_class: type[serializers.BaseSerializer]) -> Response:
        """A list-like action's rows as one page of ``?limit=&offset=``, like the collection's own list."""
        rows = self.paginate_queryset(queryset)
        return self.get_paginated_response(
            serializer_class(rows, many=True, context=self.get_serializer_context()).data
        )

    def reloaded(self, obj: models.Model) -> models.Model:
        """The object as a GET would return it (with the queryset's annotations), for the response."""
        return self.get_queryset().get(pk=obj.pk)

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        with transaction.atomic():
            obj = serializer.save()
        describe(self.request, f"{self.audit_name}.create", obj, fields=self.audit_fields(obj))
        serializer.instance = self.reloaded(obj)

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        # "Before" as stored, not as held: validation may already have set new values on the instance.
        instance = serializer.instance
        before = field_values(type(instance)._default_manager.get(pk=instance.pk))
        with transaction.atomic():
            obj = serializer.save()
        changes = changed_fields(before, field_values(obj), self.audit_redacted_fields)
        describe(self.request, f"{self.audit_name}.update", obj, changes=changes)
        serializer.instance = self.reloaded(obj)

    def perform_destroy(self, instance: models.Model) -> None:
        describe(self.request, f"{self.audit_name}.delete", instance, fields=self.audit_fields(instance))
        try:
            with transaction.atomic():
                instance.delete()
        except ProtectedError as exc:
            blockers = sorted({str(o._meta.verbose_name_plural) for o in exc.protected_objects})
            raise Conflict(
                f"{instance} cannot be deleted while {', '.join(blockers)} still refer to it "
                f"({len(exc.protected_objects)} in all)."
            ) from exc
