from celery import shared_task
from django.conf import settings

from apps.accounts.audit import purge_expired


@shared_task(soft_time_limit=600, time_limit=660, ignore_result=True)
def purge_audit_log() -> int:
    """Daily (CELERY_BEAT_SCHEDULE): drop audit entries past ``AUDIT_LOG_RETENTION_DAYS``. Cut short by
    the time limit, it has kept what it deleted; the next run goes on."""
    return purge_expired(retention_days=settings.AUDIT_LOG_RETENTION_DAYS)
