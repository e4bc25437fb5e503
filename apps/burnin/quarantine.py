"""Automatic quarantine, behind each cluster's circuit breaker (models/breaker.py says why), and the
person's decision that closes the breaker again."""

from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.audit import record
from apps.burnin.choices import BreakerChange, Outcome
from apps.burnin.models import BreakerEvent, BurnInNode, QuarantineBreaker
from apps.core.events import QuarantineBreakerChanged, announce
from apps.inventory.choices import Lifecycle
from apps.inventory.models import IllegalTransition, Node


class BreakerClosed(Exception):
    """Closing a breaker that is not open."""


def locked_breaker(cluster_id: int) -> QuarantineBreaker:
    """The cluster's breaker, created closed when it has none, locked for this transaction: two
    automations judging nodes of one cluster count its quarantines one after the other."""
    try:
        with transaction.atomic():
            QuarantineBreaker.objects.get_or_create(cluster_id=cluster_id)
    except IntegrityError:  # created by another at the same moment
        pass
    return QuarantineBreaker.objects.select_for_update().select_related("cluster").get(cluster_id=cluster_id)


def quarantine(node: Node, *, reason: str, actor: str, now: datetime) -> bool:
    """Quarantine the node on automation's behalf, unless its cluster's breaker is open or this one would
    take more than the breaker allows (then it opens). True when the node was quarantined."""
    with transaction.atomic():
        breaker = locked_breaker(node.cluster_id)
        if breaker.is_open:
            return False
        allowed, counted = breaker.allowed(), breaker.quarantined_in_window(now)
        if counted >= allowed:
            _open(breaker, node, counted, allowed, now, actor)
            return False
        node.transition(Lifecycle.QUARANTINED, actor=actor, reason=reason)
        record("node.quarantine", actor=actor, obj=node, reason=reason[:2000], automatic=True)
        return True


def _open(breaker: QuarantineBreaker, node: Node, counted: int, allowed: int, now: datetime, actor: str) -> None:
    window_h = breaker.effective_window.total_seconds() / 3600
    reason = (
        f"{counted} of the {breaker.cluster_size()} nodes of {breaker.cluster} were quarantined automatically within "
        f"{window_h:g} h, the most the breaker allows ({breaker.effective_percent} %, {allowed} nodes); {node} would "
        "have been one more. Automatic quarantine in this cluster has stopped until a person closes the breaker: "
        "many bad nodes at once is usually a check, a driver, a switch or a PDU."
    )
    QuarantineBreaker.objects.filter(pk=breaker.pk).update(is_open=True, opened_at=now, reason=reason)
    BreakerEvent.objects.create(
        breaker=breaker,
        change=BreakerChange.OPENED,
        at=now,
        actor=actor,
        reason=reason,
        detail={"counted": counted, "allowed": allowed, "withheld": node.hostname},
    )
    record("quarantine_breaker.open", actor=actor, obj=breaker.cluster, reason=reason, withheld=node.hostname)
    announce(QuarantineBreakerChanged(breaker.cluster_id, "opened"))


def close(
    breaker: QuarantineBreaker,
    *,
    actor: str,
    reason: str,
    user: AbstractBaseUser | None = None,
    quarantine_withheld: bool = False,
) -> list[Node]:
    """A person closes the breaker: automation resumes with a fresh window. With ``quarantine_withheld``
    the nodes whose quarantine it withheld (still in burn-in) are quarantined now, as this person's act;
    else they stay in burn-in for the person to move. Returns the nodes quarantined."""
    now = timezone.now()
    with transaction.atomic():
        if not QuarantineBreaker.objects.filter(pk=breaker.pk, is_open=True).update(
            is_open=False, closed_at=now, closed_by=actor[:150]
        ):
            raise BreakerClosed(f"The quarantine breaker of {breaker.cluster} is not open.")
        BreakerEvent.objects.create(breaker=breaker, change=BreakerChange.CLOSED, at=now, actor=actor, reason=reason)
        moved = _quarantine_withheld(breaker, actor, user) if quarantine_withheld else []
        announce(QuarantineBreakerChanged(breaker.cluster_id, "closed"))
    breaker.refresh_from_db()
    return moved


def _quarantine_withheld(breaker: QuarantineBreaker, actor: str, user: AbstractBaseUser | None) -> list[Node]:
    withheld = BurnInNode.objects.filter(
        outcome=Outcome.WITHHELD, node__cluster_id=breaker.cluster_id, node__lifecycle=Lifecycle.BURN_IN
    ).select_related("node")
    moved = []
    for row in withheld:
        try:
            row.node.transition(Lifecycle.QUARANTINED, actor=actor, user=user, reason=row.reason[:2000])
        except IllegalTransition:
            continue  # moved meanwhile: its state stands
        BurnInNode.objects.filter(pk=row.pk).update(outcome=Outcome.QUARANTINED)
        moved.append(row.node)
    return moved
