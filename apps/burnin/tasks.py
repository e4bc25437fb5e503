"""The burn-ins' Celery tasks, on the ``jobs`` queue beside the runs they follow; like the jobs' tasks
(apps/jobs/tasks.py, whose options they share) each takes an id (or a batch's ids) and calls a plain
function that claims its rows, so a task delivered twice does its work once, and the sweep does
whatever a lost one left."""

from celery import shared_task
from django.utils import timezone

from apps.burnin import outcomes
from apps.jobs.tasks import DURABLE


@shared_task(**DURABLE)
def commands_over(command_ids: list[int]) -> int:
    """How many nodes were judged now."""
    now = timezone.now()
    return sum(outcomes.command_over(command_id, now) is not None for command_id in command_ids)


@shared_task(**DURABLE)
def burn_in_new_node(node_id: int) -> bool:
    return outcomes.burn_in_new_node(node_id, timezone.now()) is not None


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, soft_time_limit=50, time_limit=60)
def sweep() -> int:
    return outcomes.sweep(timezone.now())
