"""Writing the audit log. Views say *what* they did with ``describe``; the middleware writes the
row for every state-changing request, and code that runs outside a request calls ``record``.

Anonymous requests (refused ones, mostly) are kept without letting anyone write rows at line rate:
the repeats of one (the same address, or IPv6 /64, action and status) within
``AUDIT_REFUSAL_WINDOW_S`` share one row, whose ``count`` says how many there were and ``last_at``
when the last was; the row keeps the first one's path, address, detail and user agent. An
undescribed anonymous request's action names its route's view (``POST cluster-detail``), not its
path, so that varying the path makes no new rows. A view whose anonymous event deserves a row of its
own says so (``describe(..., own_row=True)``: a failed sign-in, which the sign-in throttle bounds).
"""

import ipaddress
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.http import HttpRequest
from django.utils import timezone

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


def describe(
    request: HttpRequest, action: str, obj: models.Model | None = None, *, own_row: bool = False, **detail: Any
) -> None:
    """Name the action a request performed and the object it touched, for the middleware to log.
    ``own_row``: an anonymous request's row is not shared with its repeats (see above)."""
    request = getattr(request, "_request", request)  # a DRF Request wraps the one the middleware sees
    annotation = getattr(request, _ANNOTATION, None) or {"detail": {}}
    annotation["action"] = action
    annotation["own_row"] = own_row
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


def address_key(address: str | None) -> str | None:
    """The block a client address stands for, when counting what one client does: an IPv4 address
    itself, and an IPv6 address's /64 network, the block one site is given (otherwise a single IPv6
    client would have 2^64 addresses to spread its attempts over)."""
    if not address:
        return None
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


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


def record_request(request: HttpRequest, status_code: int, now: datetime | None = None) -> None:
    user = getattr(request, "user", None)
    authenticated = user is not None and user.is_authenticated
    token = getattr(request, "auth", None)
    annotation = getattr(request, _ANNOTATION, None) or {"detail": {}}
    shared = not authenticated and not annotation.get("own_row")
    action = annotation.get("action") or _undescribed_action(request, by_route=shared)
    now = now or timezone.now()
    entry = AuditLogEntry(
        timestamp=now,
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
    if shared:
        _record_repeat(entry, now)
    else:
        entry.save()


def _undescribed_action(request: HttpRequest, *, by_route: bool) -> str:
    match = getattr(request, "resolver_match", None)
    if not by_route:
        return f"{request.method} {request.path}"
    return f"{request.method} {match.view_name if match else '(no route)'}"


def _record_repeat(entry: AuditLogEntry, now: datetime) -> None:
    """Save ``entry`` as the first of its window, or count it on the row that is."""
    window_s = settings.AUDIT_REFUSAL_WINDOW_S
    window = int(now.timestamp()) // window_s * window_s
    entry._window_key = f"{address_key(entry.remote_addr)}|{entry.action}|{entry.status_code}|{window}"[:300]
    repeats = AuditLogEntry.objects.filter(_window_key=entry._window_key)
    if repeats.update(count=models.F("count") + 1, last_at=now):
        return
    entry.last_at = now
    try:
        with transaction.atomic():
            entry.save()
    except IntegrityError:  # another request of the same window saved it first
        repeats.update(count=models.F("count") + 1, last_at=now)


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
