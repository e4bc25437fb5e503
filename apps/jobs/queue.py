"""The jobs' tasks, queued once the rows they take are committed, and never at the caller's expense.

A task that cannot be queued (Redis restarting, the broker unreachable) is logged and left: its rows
say what is to be done, and the jobs sweep (every ``JOBS_SWEEP_S``) does it. So a request that
launched a run, or a gateway consumer that stored a result, never fails for want of a broker.
"""

import logging
from collections.abc import Sequence
from functools import partial

from celery import Task, current_app
from django.conf import settings
from django.db import transaction
from kombu.exceptions import KombuError
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


def start_run(run_id: int) -> None:
    _after_commit("start_run", run_id)


def commands_finished(command_ids: Sequence[int]) -> None:
    """One task for all the commands that ended in a transaction: a batch of a thousand agents' results
    queued a task each, a Redis round trip each on the gateway's database thread."""
    if command_ids:
        _after_commit("commands_finished", list(command_ids))


def advance_node(node_id: int) -> None:
    _after_commit("advance_node", node_id)


TaskArguments = tuple[int | list[int], ...]  # ids: a task takes ids, never rows


def _after_commit(task_name: str, *args: int | list[int]) -> None:
    transaction.on_commit(partial(_send, task_name, args))


def _send(task_name: str, args: TaskArguments) -> None:
    # By name from Celery's registry (JobsConfig.ready registers the tasks): the tasks module imports
    # the modules that queue them, so importing it here would close a circle.
    send(current_app.tasks[f"apps.jobs.tasks.{task_name}"], args)


def send(task: Task, args: TaskArguments) -> None:
    """Queue ``task`` now, or log and leave it to a sweep when the broker is away (the apps built on
    runs, apps/burnin, queue theirs through here too)."""
    try:
        # retry=False: a broker that is down answers at once, rather than after kombu's retries hold
        # up the caller (a gateway consumer's database thread, an API request).
        task.apply_async(args, retry=False)
    except (KombuError, RedisError, OSError) as exc:
        logger.warning(
            "Could not queue task %s%r (%s); the jobs sweep does its work within %s s (a burn-in's, its own sweep)",
            task.name,
            args,
            exc,
            settings.JOBS_SWEEP_S,
        )
