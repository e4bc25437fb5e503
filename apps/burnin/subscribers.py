"""What the burn-ins hear (registered in apps.py), each a query and at most a task queued: subscribers
run on the thread that committed (the gateway's, often), so the work itself is the tasks'."""

from django.conf import settings

from apps.burnin import tasks
from apps.burnin.models import QuarantineBreaker
from apps.core.events import CommandChanged, NodeChanged
from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Cluster, Node
from apps.jobs import queue
from apps.jobs.choices import COMMAND_FINAL
from apps.jobs.models import Command


def command_changed(event: CommandChanged) -> None:
    """A burn-in's command ended: hand its snapshot on and judge its node (a task)."""
    if event.change != "state":
        return
    if Command.objects.filter(pk=event.command_id, state__in=COMMAND_FINAL, run__burn_in__isnull=False).exists():
        queue.send(tasks.command_over, (event.command_id,))


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
