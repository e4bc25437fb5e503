import re
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from apps.accounts.roles import Role, lower_role, role_rank
from apps.core.secrets import hash_secret, new_secret, secret_matches, split_presented


class User(AbstractUser):
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    @property
    def effective_role(self) -> str | None:
        """Superusers are admins whatever their role field says; inactive users have no role."""
        if not self.is_active:
            return None
        return Role.ADMIN if self.is_superuser else self.role

    def has_role(self, role: str) -> bool:
        return role_rank(self.effective_role) >= role_rank(role)


def scope_problem(role: str, owner: User) -> str | None:
    """Why ``owner`` cannot hold a token scoped to ``role``, or None if it can."""
    if owner.effective_role is None:
        return f"{owner.get_username()} is deactivated and cannot hold API tokens."
    if role_rank(role) > role_rank(owner.effective_role):
        return f"A token cannot have more rights than its owner ({owner.get_username()} is {owner.effective_role})."
    return None


TOKEN_PREFIX = "cpt"
KEY_ID_PATTERN = re.compile(r"[0-9a-f]{8}")


class TokenRefused(Exception):
    """Why a presented token was not accepted. The message is safe to show the caller: it says
    more than "unknown" only to someone who holds the token's secret."""


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def usable(self) -> "ApiTokenQuerySet":
        now = timezone.now()
        return self.filter(revoked_at__isnull=True, user__is_active=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    """A named credential for automation, scoped to a role no higher than its owner's.

    The secret is shown once, when the token is created; only its SHA-256 digest is stored. The
    first characters (``key_id``) are stored in clear to find the row and to tell tokens apart.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    key_id = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_ip = models.GenericIPAddressField(null=True, blank=True, editable=False)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="api_token_unique_name_per_user")]

    def __str__(self) -> str:
        return f"{self.name} ({TOKEN_PREFIX}_{self.key_id}…)"

    def clean(self) -> None:
        if self.user_id:
            problem = scope_problem(self.role, self.user)
            if problem:
                raise ValidationError({"role": problem})

    @classmethod
    def issue(cls, *, user: User, name: str, role: str, expires_at: Any = None) -> tuple["ApiToken", str]:
        """Create a token and return it with its clear-text value, which is never stored."""
        key_id, secret, presented = new_secret(TOKEN_PREFIX, key_bytes=4)
        token = cls(
            user=user, name=name, role=role, key_id=key_id, secret_hash=hash_secret(secret), expires_at=expires_at
        )
        token.full_clean()
        token.save()
        return token, presented

    @classmethod
    def authenticate(cls, presented: str) -> "ApiToken":
        """The token whose clear-text value was presented, or TokenRefused saying why not."""
        parts = split_presented(presented, TOKEN_PREFIX)
        if parts is None or not KEY_ID_PATTERN.fullmatch(parts[0]):
            raise TokenRefused(f"Malformed API token: expected {TOKEN_PREFIX}_<id>_<secret>.")
        key_id, secret = parts
        token = cls.objects.select_related("user").filter(key_id=key_id).first()
        if not secret_matches(token.secret_hash if token else None, secret):
            raise TokenRefused("Unknown API token.")
        if token.revoked_at is not None:
            raise TokenRefused(f"API token {token.name!r} was revoked at {token.revoked_at:%Y-%m-%d %H:%M} UTC.")
        if token.expires_at is not None and token.expires_at <= timezone.now():
            raise TokenRefused(f"API token {token.name!r} expired at {token.expires_at:%Y-%m-%d %H:%M} UTC.")
        if not token.user.is_active:
            raise TokenRefused(f"The owner of API token {token.name!r} is deactivated.")
        return token

    @property
    def is_usable(self) -> bool:
        now = timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now) and self.user.is_active

    @property
    def effective_role(self) -> str | None:
        """The lower of the token's scope and its owner's current role: demoting a user demotes their tokens."""
        owner_role = self.user.effective_role
        return lower_role(self.role, owner_role) if owner_role else None

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])

    def record_use(self, ip: str | None) -> None:
        """Note the use at most once per ``API_TOKEN_LAST_USED_RESOLUTION_S``, so a busy script does not
        write on every request. The update is conditional, so concurrent requests write it once."""
        now = timezone.now()
        stale = now - timedelta(seconds=settings.API_TOKEN_LAST_USED_RESOLUTION_S)
        if self.last_used_at is not None and self.last_used_at > stale:
            return
        ApiToken.objects.filter(pk=self.pk).filter(
            models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lte=stale)
        ).update(last_used_at=now, last_used_ip=ip)
        self.last_used_at, self.last_used_ip = now, ip


class AuditLogEntryQuerySet(models.QuerySet["AuditLogEntry"]):
    def older_than(self, days: int) -> "AuditLogEntryQuerySet":
        return self.filter(timestamp__lt=timezone.now() - timedelta(days=days))


class AuditLogEntry(models.Model):
    """Who did what, when and from where. One row per state-changing request or command, except
    that repeated refusals of anonymous callers share one row per address, action, status and window
    (``count`` says how many).

    Rows are written outside the request's transaction, so a refused or failed change is
    recorded too (with its status code).
    """

    timestamp = models.DateTimeField(default=timezone.now, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor = models.CharField(
        max_length=150, help_text="Username, 'anonymous', or 'system:<command>' at the time of the action."
    )
    action = models.CharField(
        max_length=100, db_index=True, help_text="What was done, e.g. 'node.quarantine' or 'POST /api/v1/nodes/'."
    )
    method = models.CharField(max_length=10, blank=True)
    path = models.CharField(max_length=500, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    object_type = models.CharField(max_length=100, blank=True)
    object_id = models.CharField(max_length=100, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    remote_addr = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)
    count = models.PositiveIntegerField(
        default=1, help_text="How many times it happened: repeated anonymous refusals share one row per window."
    )
    last_at = models.DateTimeField(null=True, blank=True, help_text="When a shared row's last repeat happened.")
    # Derived: the address, action, status and window a shared row counts (apps/accounts/audit.py).
    _window_key = models.CharField(max_length=300, null=True, blank=True, unique=True, editable=False)

    objects = AuditLogEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-timestamp", "-id"]
        verbose_name_plural = "audit log entries"
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"{self.timestamp:%Y-%m-%d %H:%M:%S} {self.actor} {self.action}"


class FailureCounterQuerySet(models.QuerySet["FailureCounter"]):
    def stale(self, now: datetime, window: timedelta) -> "FailureCounterQuerySet":
        """Counters that hold nothing any more: their window has passed and they lock nothing."""
        return self.filter(window_started_at__lte=now - window).filter(
            models.Q(locked_until__isnull=True) | models.Q(locked_until__lte=now)
        )


class FailureCounter(models.Model):
    """Recent failed attempts of one kind (``scope``: a sign-in for an account, a sign-in or an agent
    enrollment from an address) by one ``key`` (the username tried, the client address), and the time
    until which that key is locked out. ``apps/accounts/throttle.py`` holds the policy; deleting a row
    (the admin can) unlocks its key."""

    scope = models.CharField(max_length=32)
    key = models.CharField(max_length=150)
    failures = models.PositiveIntegerField(default=0, help_text="Failures since the window started.")
    window_started_at = models.DateTimeField()
    locked_until = models.DateTimeField(null=True, blank=True)

    objects = FailureCounterQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "key"], name="failure_counter_unique_scope_key")]
        verbose_name = "sign-in and enrollment throttle"

    def __str__(self) -> str:
        return f"{self.scope} {self.key}"
