"""Celery tasks for rollups, retention and partitions, on the ``telemetry`` queue (CELERY_TASK_ROUTES;
beat: CELERY_BEAT_SCHEDULE in settings).

Each task is a thin call into rollups.py or retention.py. They are idempotent and keep their progress
in the database, so a run that is cut short, fails or is skipped is made good by the next one: no retries.
"""

from dataclasses import asdict
from typing import Any

from celery import shared_task
from django.utils import timezone

from apps.telemetry import retention, rollups

RETENTION_SOFT_LIMIT_S = 540


@shared_task(soft_time_limit=240, time_limit=300, ignore_result=True)
def roll_up_minutes() -> dict[str, Any]:
    """Every minute: the 1-minute rollups of whatever was received since the last run."""
    return vars(rollups.roll_up_received(timezone.now()))


@shared_task(soft_time_limit=540, time_limit=600, ignore_result=True)
def roll_up_hours() -> dict[str, Any]:
    """Every few minutes: the hourly rollups of hours that have ended."""
    return vars(rollups.roll_up_completed_hours(timezone.now()))


@shared_task(soft_time_limit=RETENTION_SOFT_LIMIT_S, time_limit=600, ignore_result=True)
def apply_retention() -> dict[str, Any]:
    """Every ten minutes: drop the days past retention (PostgreSQL), or delete the rows in batches
    (SQLite), stopping well before the time limit (the next run carries on)."""
    return asdict(retention.apply_retention(timezone.now(), time_budget_s=RETENTION_SOFT_LIMIT_S - 60))


@shared_task(soft_time_limit=60, time_limit=120, ignore_result=True)
def create_partitions() -> list[str]:
    """Every hour: today's and the next days' partitions, so the writer never waits on DDL."""
    return retention.create_partitions_ahead(timezone.now())
