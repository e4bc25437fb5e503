"""Whether each node's agent is heard from: online, or unreachable once it falls silent.

The promise (``AGENT_UNREACHABLE_AFTER_S``, 15 s by default) is how long after its last message a
silent node is marked unreachable. Three delays add up to it: the gateway writes ``last_seen_at``
once a second for all the nodes it heard from (``LAST_SEEN_RESOLUTION_S``), the sweep runs every
``AGENT_LIVENESS_SWEEP_S`` (5 s), and the silence it tolerates is what is left (9 s), which is
still nine telemetry intervals and nearly two heartbeats.

Every change of state is a conditional update on the state read, so a sweep and a returning
agent racing each other change the node once, and each change calls its hook once.
"""

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final

from django.conf import settings

from apps.gateway import sinks
from apps.inventory.choices import Liveness
from apps.inventory.models import Node

LAST_SEEN_RESOLUTION_S: Final = 1.0


def silence_limit() -> timedelta:
    """How long a node may be silent before the sweep marks it unreachable."""
    return timedelta(
        seconds=settings.AGENT_UNREACHABLE_AFTER_S - settings.AGENT_LIVENESS_SWEEP_S - LAST_SEEN_RESOLUTION_S
    )


def record_heard(node_ids: Iterable[int], now: datetime) -> list[Node]:
    """Note that these nodes' agents spoke at ``now``; bring back any that were not online. Returns those."""
    node_ids = set(node_ids)
    if not node_ids:
        return []
    if Node.objects.filter(pk__in=node_ids, liveness=Liveness.ONLINE).update(last_seen_at=now) == len(node_ids):
        return []  # every one was online already: the bookkeeper's usual second, one statement
    returned = []
    for node in Node.objects.filter(pk__in=node_ids).exclude(liveness=Liveness.ONLINE):
        previous = node.liveness
        if Node.objects.filter(pk=node.pk, liveness=previous).update(liveness=Liveness.ONLINE, last_seen_at=now):
            node.liveness, node.last_seen_at = Liveness.ONLINE, now
            returned.append(node)
            if previous == Liveness.UNREACHABLE:
                sinks.node_recovered(node)
            else:
                sinks.announce_liveness(node)  # seen for the first time: nothing recovered
    return returned


def sight_unreachable(now: datetime) -> None:
    """Every sweep: the nodes still unreachable are sighted again, so that a liveness failure resolved
    while its node stayed silent is followed by a new one."""
    silent = Node.objects.filter(liveness=Liveness.UNREACHABLE).values_list("pk", flat=True)
    sinks.nodes_still_unreachable(list(silent), now)


def mark_unreachable(now: datetime) -> list[Node]:
    """Mark online nodes silent for longer than ``silence_limit()`` unreachable; return them."""
    cutoff = now - silence_limit()
    marked = []
    for node in Node.objects.filter(liveness=Liveness.ONLINE, last_seen_at__lt=cutoff):
        still_silent = Node.objects.filter(pk=node.pk, liveness=Liveness.ONLINE, last_seen_at__lt=cutoff)
        if still_silent.update(liveness=Liveness.UNREACHABLE):
            node.liveness = Liveness.UNREACHABLE
            marked.append(node)
            sinks.node_unreachable(node)
    return marked
