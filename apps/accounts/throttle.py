"""Throttles on failed attempts: sign-ins by account and by client address, agent enrollments by address.

The policy, one rule for every scope: a key (the username tried, the client address) that fails
``limit`` times within ``window`` is locked out for ``window`` from that failure. While it is locked,
attempts are refused before any credential is checked and are not counted, so a lockout ends on time
however hard it is hammered; after it ends, counting starts afresh. A successful sign-in clears its
account's count (not its address's). Counters are rows (``FailureCounter``), so every server process
sees the same ones and a restart forgets nothing; an admin unlocks a key by deleting its row.

Callers pass an address policy ``address_key(address)`` (apps/accounts/audit.py): the address for
IPv4, the /64 network for IPv6.

Functions take ``now``: tests move time themselves instead of waiting.
"""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from apps.accounts.models import FailureCounter


@dataclass(frozen=True)
class Policy:
    scope: str
    limit: int
    window: timedelta
    refusal: str  # what a locked-out caller is told; {wait} is how long is left


def signin_account_policy() -> Policy:
    return Policy(
        "signin.account",
        settings.SIGNIN_FAILURES_PER_ACCOUNT,
        settings.SIGNIN_LOCKOUT,
        "Too many failed sign-ins for this account: it is locked for {wait}. An admin can unlock it sooner.",
    )


def signin_address_policy() -> Policy:
    return Policy(
        "signin.address",
        settings.SIGNIN_FAILURES_PER_ADDRESS,
        settings.SIGNIN_LOCKOUT,
        "Too many failed sign-ins from your address: signing in from it is locked for {wait}.",
    )


def enrollment_address_policy() -> Policy:
    return Policy(
        "enrollment.address",
        settings.ENROLLMENT_FAILURES_PER_ADDRESS,
        settings.ENROLLMENT_LOCKOUT,
        "Too many refused enrollments from this address: try again in {wait}.",
    )


@dataclass(frozen=True)
class Lockout:
    """A key locked out until ``until``: what to tell the caller, and for how long."""

    policy: Policy
    key: str
    until: datetime

    def retry_after_s(self, now: datetime) -> int:
        return max(1, math.ceil((self.until - now).total_seconds()))

    def message(self, now: datetime) -> str:
        seconds = self.retry_after_s(now)
        wait = f"{seconds} seconds" if seconds < 90 else f"{math.ceil(seconds / 60)} minutes"
        return self.policy.refusal.format(wait=wait)


def lockout(policy: Policy, key: str | None, now: datetime) -> Lockout | None:
    """The lockout ``key`` is under now, or None (always None for no key)."""
    if not key:
        return None
    until = (
        FailureCounter.objects.filter(scope=policy.scope, key=key[:150], locked_until__gt=now)
        .values_list("locked_until", flat=True)
        .first()
    )
    return Lockout(policy, key, until) if until else None


def first_lockout(checks: list[tuple[Policy, str | None]], now: datetime) -> Lockout | None:
    """The first lockout among (policy, key) pairs, in order, or None."""
    for policy, key in checks:
        found = lockout(policy, key, now)
        if found:
            return found
    return None


def record_failure(policy: Policy, key: str | None, now: datetime) -> Lockout | None:
    """Count a failure of ``key``; the lockout it is under afterwards (this one's or an earlier one), or None.
    The row is locked while it is counted, so concurrent failures are all counted."""
    if not key:
        return None
    with transaction.atomic():
        counter, _ = FailureCounter.objects.select_for_update().get_or_create(
            scope=policy.scope, key=key[:150], defaults={"window_started_at": now}
        )
        if counter.locked_until and counter.locked_until > now:
            return Lockout(policy, key, counter.locked_until)
        if counter.window_started_at <= now - policy.window:
            counter.failures, counter.window_started_at = 0, now
        counter.failures += 1
        if counter.failures >= policy.limit:
            counter.locked_until, counter.failures, counter.window_started_at = now + policy.window, 0, now
        counter.save(update_fields=["failures", "window_started_at", "locked_until"])
    return Lockout(policy, key, counter.locked_until) if counter.locked_until and counter.locked_until > now else None


def record_failures(checks: list[tuple[Policy, str | None]], now: datetime) -> Lockout | None:
    """Count a failure against each (policy, key); the first lockout any is under afterwards, or None."""
    lockouts = [record_failure(policy, key, now) for policy, key in checks]
    return next((found for found in lockouts if found), None)


def clear(policy: Policy, key: str | None) -> None:
    if key:
        FailureCounter.objects.filter(scope=policy.scope, key=key[:150]).delete()


def forget_stale(now: datetime) -> int:
    """Delete counters that hold nothing any more (hourly, apps/accounts/tasks.py); how many."""
    window = max(settings.SIGNIN_LOCKOUT, settings.ENROLLMENT_LOCKOUT)
    return FailureCounter.objects.stale(now, window).delete()[0]
