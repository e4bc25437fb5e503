from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.accounts import throttle
from apps.accounts.audit import purge_expired


@shared_task(soft_time_limit=600, time_limit=660, ignore_result=True)
def purge_audit_log() -> int:
    """Daily (CELERY_BEAT_SCHEDULE): drop audit entries past ``AUDIT_LOG_RETENTION_DAYS``. Cut short by
    the time limit, it has kept what it deleted; the next run goes on."""
    return purge_expired(retention_days=settings.AUDIT_LOG_RETENTION_DAYS)


@shared_task(soft_time_limit=60, time_limit=90, ignore_result=True)
def forget_stale_throttles() -> int:
    """Hourly: delete failure counters whose window has passed and that lock nothing."""
    return throttle.forget_stale(timezone.now())
