"""Who may hold a live stream: a signed-in user with a role (any role: every stream is read-only).

The ASGI stack has already checked the Origin (AllowedHostsOriginValidator) and loaded the session's
user (AuthMiddlewareStack) when a consumer starts. Consumers refuse on connect, and look again while
the socket lives, since a session can end and a user can be deactivated meanwhile: the same checks
as an HTTP request (the session exists and has not expired, the password has not changed since it
was opened) plus the role.
"""

from enum import IntEnum
from importlib import import_module
from types import SimpleNamespace

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from apps.accounts.models import User


class Refusal(IntEnum):
    """WebSocket close codes (4000-4999 are the application's), after HTTP's 401 and 403."""

    SIGNED_OUT = 4401  # no session, or it ended: sign in again
    FORBIDDEN = 4403  # signed in, but the user is deactivated or has no role


def refusal_on_connect(user: AbstractBaseUser | AnonymousUser | None) -> Refusal | None:
    """Why the user the auth middleware found may not connect, or None."""
    if user is None or not user.is_authenticated:
        return Refusal.SIGNED_OUT
    return None if getattr(user, "effective_role", None) else Refusal.FORBIDDEN


def refusal_now(session_key: str | None, user_id: int) -> Refusal | None:
    """Why the connection opened by ``user_id`` with this session must close now, or None (sync: 2-3
    queries). Deactivated users are refused as forbidden, not signed out, so the page can say so."""
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = auth.get_user(SimpleNamespace(session=session))  # flushes a session whose password hash is stale
    if user.is_authenticated and user.pk == user_id:
        return refusal_on_connect(user)
    if User.objects.filter(pk=user_id, is_active=False).exists():  # the auth backend refuses inactive users
        return Refusal.FORBIDDEN
    return Refusal.SIGNED_OUT
