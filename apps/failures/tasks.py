"""Celery tasks of the failures domain (beat: CELERY_BEAT_SCHEDULE). The work is in plain functions
(apps/failures/stragglers.py)."""

import logging

from celery import shared_task
from django.utils import timezone

from apps.failures.stragglers import detect_stragglers

logger = logging.getLogger(__name__)


# Beat runs it every 30 s (CELERY_BEAT_SCHEDULE) with the same expiry: a run that could not start in
# time is dropped, not stacked behind the next one. It retries nothing: the next run is 30 s away.
@shared_task(soft_time_limit=25, time_limit=30, ignore_result=True)
def flag_stragglers() -> dict[str, int]:
    changes = detect_stragglers(timezone.now())
    summary = {"raised": len(changes.raised), "refreshed": len(changes.refreshed), "cleared": len(changes.cleared)}
    if changes.raised or changes.cleared:
        logger.info("Straggler flags: %(raised)d raised, %(refreshed)d still active, %(cleared)d cleared.", summary)
    return summary
