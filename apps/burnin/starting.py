"""Starting a burn-in: every node is moved into burn-in (a node under test takes nothing else: the
schedulers only place work on nodes in service), judged by its node type's current thresholds, and
given the suite's steps as one run of apps/jobs, all in one transaction."""

from collections.abc import Sequence
from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from apps.burnin.choices import Trigger
from apps.burnin.models import BurnIn, BurnInNode, Suite, ThresholdVersion
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Cluster, Node
from apps.jobs.models import Run

# Where a node may start a burn-in from. One in service is drained first (by a person, who knows what
# runs on it); a retired one runs nothing.
STARTS_FROM = frozenset({Lifecycle.NEW, Lifecycle.BURN_IN, Lifecycle.QUARANTINED, Lifecycle.DRAINED})


class CannotStart(Exception):
    """Nodes that cannot start a burn-in now; the message names them and why."""


def refusals(nodes: Sequence[Node]) -> list[str]:
    """Why each node that cannot start a burn-in now cannot (empty when all can)."""
    return [
        f"{node.hostname} is {node.get_lifecycle_display().lower()}"
        + (": drain it first" if node.lifecycle == Lifecycle.IN_SERVICE else "")
        for node in nodes
        if node.lifecycle not in STARTS_FROM
    ]


def start_burn_in(
    nodes: Sequence[Node],
    suite: Suite,
    *,
    actor: str,
    deadline: datetime,
    user: AbstractBaseUser | None = None,
    cluster: Cluster | None = None,
    into_service: bool = True,
    trigger: str = Trigger.REQUEST,
    idempotency_key: str | None = None,
    note: str = "",
) -> BurnIn:
    """Write the burn-in, move its nodes into burn-in and launch its run. Raises CannotStart, leaving
        nothing written, when a node cannot start now. ``note``, a person's reason, joins the one each node's
    lifecycle history records. Auditing the request stays with the caller."""
    with transaction.atomic():
        locked = list(Node.objects.select_for_update().filter(pk__in=[n.pk for n in nodes]).select_related("node_type"))
        refused = refusals(locked)
        if refused:
            raise CannotStart("; ".join(refused) + ".")
        thresholds = {t: ThresholdVersion.objects.current(t) for t in {node.node_type for node in locked}}
        run = Run.objects.launch(
            nodes=locked,
            steps=suite.run_steps(),
            deadline=deadline,
            actor=actor,
            user=user,
            title=f"burn-in: {suite.title}" + (f" of {cluster}" if cluster else ""),
            idempotency_key=idempotency_key,
        )
        burn_in = BurnIn.objects.create(
            run=run, suite=suite, cluster=cluster, into_service=into_service, trigger=trigger, actor=actor[:150]
        )
        reason = f"{burn_in} started by {actor}" + (f": {note.strip()}" if note.strip() else "")
        for node in locked:
            before = node.lifecycle
            if before != Lifecycle.BURN_IN:
                node.transition(Lifecycle.BURN_IN, actor=actor, user=user, reason=reason)
            BurnInNode.objects.create(
                burn_in=burn_in, node=node, thresholds=thresholds[node.node_type], lifecycle_before=before
            )
    return burn_in
