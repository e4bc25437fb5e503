"""The one base class every API viewset builds on (compare NetBox's netbox/api/viewsets): role
checks, atomic writes, and an audit description of every change."""

from typing import Any

from django.db import models, transaction
from django.db.models import ProtectedError
from rest_framework import serializers, viewsets

from apps.accounts.audit import describe
from apps.core.api.exceptions import Conflict


def changed_fields(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    return {name: [before.get(name), value] for name, value in after.items() if before.get(name) != value}


def field_values(obj: models.Model) -> dict[str, Any]:
    """Concrete, editable field values in JSON-safe form, for the audit log's before/after."""
    return {f.attname: f.value_to_string(obj) for f in obj._meta.concrete_fields if f.editable and not f.primary_key}


class BaseModelViewSet(viewsets.ModelViewSet):
    """Reads need ``read_role`` (viewer), writes ``write_role`` (admin); see RolePermission.

    Writes run in one transaction, so a failure leaves nothing half-written, and each one is
    described for the audit log with the fields it changed.
    """

    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    @property
    def audit_name(self) -> str:
        return self.get_queryset().model._meta.model_name

    def reloaded(self, obj: models.Model) -> models.Model:
        """The object as a GET would return it (with the queryset's annotations), for the response."""
        return self.get_queryset().get(pk=obj.pk)

    def after_create(self, obj: models.Model) -> None:
        """Hook for rows that must be written with the new object, in its transaction."""

    def perform_create(self, serializer: serializers.BaseSerializer) -> None:
        with transaction.atomic():
            obj = serializer.save()
            self.after_create(obj)
        describe(self.request, f"{self.audit_name}.create", obj, fields=field_values(obj))
        serializer.instance = self.reloaded(obj)

    def perform_update(self, serializer: serializers.BaseSerializer) -> None:
        before = field_values(serializer.instance)
        with transaction.atomic():
            obj = serializer.save()
        describe(self.request, f"{self.audit_name}.update", obj, changes=changed_fields(before, field_values(obj)))
        serializer.instance = self.reloaded(obj)

    def perform_destroy(self, instance: models.Model) -> None:
        describe(self.request, f"{self.audit_name}.delete", instance, fields=field_values(instance))
        try:
            with transaction.atomic():
                instance.delete()
        except ProtectedError as exc:
            blockers = sorted({str(o._meta.verbose_name_plural) for o in exc.protected_objects})
            raise Conflict(
                f"{instance} cannot be deleted while {', '.join(blockers)} still refer to it "
                f"({len(exc.protected_objects)} in all)."
            ) from exc
