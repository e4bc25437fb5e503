"""The jobs' Celery tasks, on the ``jobs`` queue (settings: CELERY_TASK_ROUTES). Each takes an id (or
the ids of a batch: the commands a batch of agents' results ended), and the work is a plain function
in dispatch.py that claims its rows with conditional updates.

That is what makes them safe to deliver twice, so they are ``acks_late``: the broker keeps a task's
message until the task has run, and a worker killed halfway (kill -9, OOM, a lost host) leaves it to
be delivered again (``reject_on_worker_lost`` does so at once when a pool process dies; the broker's
visibility timeout, when the whole worker does). A database that is briefly away is retried with
capped backoff; nothing else is retried here, because the jobs sweep (beat, every JOBS_SWEEP_S) does
again whatever a task left undone, whatever the reason.
"""

from celery import shared_task
from django.db import DatabaseError
from django.utils import timezone

from apps.jobs import dispatch

DURABLE = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
    "soft_time_limit": 50,
    "time_limit": 60,  # well under the broker's visibility timeout (CELERY_BROKER_TRANSPORT_OPTIONS)
    "autoretry_for": (DatabaseError,),
    "retry_backoff": 2,
    "retry_backoff_max": 30,
    "max_retries": 5,
}


@shared_task(**DURABLE)
def start_run(run_id: int) -> bool:
    return dispatch.start_run(run_id, timezone.now())


@shared_task(**DURABLE)
def commands_finished(command_ids: list[int]) -> None:
    dispatch.commands_finished(command_ids, timezone.now())


@shared_task(**DURABLE)
def advance_node(node_id: int) -> int:
    return len(dispatch.advance_nodes([node_id], timezone.now()))


# Beat runs it every JOBS_SWEEP_S with that expiry: one that could not start in time is dropped, not
# stacked behind the next. Not retried: the next one is seconds away.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, soft_time_limit=50, time_limit=60)
def sweep() -> dict[str, int]:
    return dispatch.sweep(timezone.now())
