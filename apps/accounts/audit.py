"""Writing the audit log. Views say *what* they did with ``describe``; the middleware writes the
row for every state-changing request, and code that runs outside a request calls ``record``."""

import ipaddress
from typing import Any

from django.conf import settings
from django.db import models
from django.http import HttpRequest

from apps.accounts.models import ApiToken, AuditLogEntry, User

_ANNOTATION = "_audit_annotation"


# The before/after of a change, for an entry's detail ----------------------------------------------

REDACTED = "(redacted)"  # a field the log names but never shows (a password hash)


def changed_fields(
    before: dict[str, Any], after: dict[str, Any], redacted: frozenset[str] = frozenset()
) -> dict[str, list[Any]]:
    """``{field: [before, after]}`` for the fields that changed; a redacted field says only that it changed."""
    return {
        name: [REDACTED, REDACTED] if name in redacted else [before.get(name), value]
        for name, value in after.items()
        if before.get(name) != value
    }


def field_values(obj: models.Model) -> dict[str, Any]:
    """Concrete, editable field values in JSON-safe form, for the audit log's before/after."""
    return {f.attname: f.value_to_string(obj) for f in obj._meta.concrete_fields if f.editable and not f.primary_key}


def redact(values: dict[str, Any], redacted: frozenset[str]) -> dict[str, Any]:
    return {name: REDACTED if name in redacted else value for name, value in values.items()}


# Entries -------------------------------------------------------------------------------------------


def _object_fields(obj: models.Model | None) -> dict[str, str]:
    if obj is None:
        return {}
    return {
        "object_type": obj._meta.label_lower,
        "object_id": str(obj.pk or ""),
        "object_repr": str(obj)[:200],
    }


def describe(request: HttpRequest, action: str, obj: models.Model | None = None, **detail: Any) -> None:
    """Name the action a request performed and the object it touched, for the middleware to log."""
    request = getattr(request, "_request", request)  # a DRF Request wraps the one the middleware sees
    annotation = getattr(request, _ANNOTATION, None) or {"detail": {}}
    annotation["action"] = action
    if obj is not None:
        annotation["object"] = _object_fields(obj)  # now: after a delete the object has no pk
    annotation["detail"].update(detail)
    setattr(request, _ANNOTATION, annotation)


def _ip_or_none(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str | None:
    """The caller's IP address, or None when there is no valid one.

    Behind a trusted proxy (``TRUST_X_FORWARDED_FOR``) it is the last ``X-Forwarded-For`` entry: the
    one the proxy appended. Entries to its left come from the client and can be anything.
    """
    if settings.TRUST_X_FORWARDED_FOR:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        if forwarded:
            address = _ip_or_none(forwarded.split(",")[-1])
            if address:
                return address
    return _ip_or_none(request.META.get("REMOTE_ADDR") or "")


def record(
    action: str,
    *,
    actor: str,
    user: User | None = None,
    obj: models.Model | None = None,
    **detail: Any,
) -> AuditLogEntry:
    """Log an action taken outside an HTTP request (a management command, a task, an agent)."""
    return AuditLogEntry.objects.create(
        actor=actor[:150], user=user, action=action[:100], detail=detail, **_object_fields(obj)
    )


def record_request(request: HttpRequest, status_code: int) -> AuditLogEntry:
    user = getattr(request, "user", None)
    authenticated = user is not None and user.is_authenticated
    token = getattr(request, "auth", None)
    annotation = getattr(request, _ANNOTATION, None) or {"detail": {}}
    action = annotation.get("action") or f"{request.method} {request.path}"
    return AuditLogEntry.objects.create(
        user=user if authenticated else None,
        token=token if isinstance(token, ApiToken) else None,
        actor=user.get_username() if authenticated else "anonymous",
        action=action[:100],
        method=request.method or "",
        path=request.get_full_path()[:500],
        status_code=status_code,
        detail=annotation["detail"],
        remote_addr=client_address(request),
        user_agent=request.META.get("HTTP_USER_AGENT", "")[:300],
        **annotation.get("object", {}),
    )


PURGE_ACTOR = "system:purge_audit_log"


def purge_expired(*, retention_days: int, batch_size: int = 5_000) -> int:
    """Delete entries older than ``retention_days``, oldest first, ``batch_size`` rows per statement,
    so no single transaction holds locks on a year of rows. Returns how many were deleted and leaves
    one entry saying so. Stopping half-way is safe: the next run carries on."""
    expired = AuditLogEntry.objects.older_than(retention_days)
    deleted = 0
    while batch := list(expired.order_by("timestamp", "id").values_list("pk", flat=True)[:batch_size]):
        deleted += AuditLogEntry.objects.filter(pk__in=batch).delete()[0]
    if deleted:
        record("audit_log.purge", actor=PURGE_ACTOR, deleted=deleted, retention_days=retention_days)
    return deleted
