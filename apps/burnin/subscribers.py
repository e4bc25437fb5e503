"""What the burn-ins hear (registered in apps.py), each a query and at most a task queued whatever the
event's size: subscribers run on the thread that committed (the gateway's, often), so the work itself
is the tasks'."""

from django.conf import settings

from apps.burnin import tasks
from apps.burnin.models import QuarantineBreaker
from apps.core.events import CommandsChanged, NodeChanged
from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Cluster, Node
from apps.jobs import queue
from apps.jobs.choices import COMMAND_FINAL
from apps.jobs.models import Command


def commands_changed(event: CommandsChanged) -> None:
    """Burn-ins' commands ended: hand their snapshots on and judge their nodes (one task for them all)."""
    if event.change != "state":
        return
    ended = Command.objects.filter(pk__in=event.command_ids, state__in=COMMAND_FINAL, run__burn_in__isnull=False)
    if over := sorted(ended.values_list("pk", flat=True)):
        queue.send(tasks.commands_over, (over,))


def node_changed(event: NodeChanged) -> None:
    """A new node's agent came online: its enrollment burn-in, when one is configured (a task)."""
    if event.change != "liveness" or not settings.BURNIN_ON_ENROLLMENT:
        return
    fresh = Node.objects.filter(
        pk=event.node_id, lifecycle=Lifecycle.NEW, liveness=Liveness.ONLINE, burn_ins__isnull=True
    )
    if fresh.exists():
        queue.send(tasks.burn_in_new_node, (event.node_id,))


def cluster_saved(sender: type[Cluster], instance: Cluster, created: bool, **kwargs: object) -> None:
    """Every cluster has its quarantine breaker, closed, from its start (the API and /metrics list them)."""
    if created:
        QuarantineBreaker.objects.get_or_create(cluster=instance)
