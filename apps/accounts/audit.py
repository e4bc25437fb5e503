"""Writing the audit log. Views say *what* they did with ``describe``; the middleware writes the
row for every state-changing request, and code that runs outside a request calls ``record``."""

from typing import Any

from django.conf import settings
from django.db import models
from django.http import HttpRequest

from apps.accounts.models import ApiToken, AuditLogEntry, User

_ANNOTATION = "_audit_annotation"


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


def client_address(request: HttpRequest) -> str | None:
    if settings.TRUST_X_FORWARDED_FOR:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        if forwarded:
            return forwarded.split(",")[0].strip() or None
    return request.META.get("REMOTE_ADDR") or None


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
