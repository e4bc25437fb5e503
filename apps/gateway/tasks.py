from celery import shared_task
from django.utils import timezone

from apps.gateway.liveness import mark_unreachable, sight_unreachable


@shared_task(soft_time_limit=4, time_limit=10, ignore_result=True)
def sweep_liveness() -> list[str]:
    """Every AGENT_LIVENESS_SWEEP_S (beat), on the gateway queue: mark nodes whose agents fell silent
    unreachable, and sight again those still unreachable.

    Nothing to retry: a sweep that fails or expires in the queue is replaced by the next one.
    """
    now = timezone.now()
    marked = mark_unreachable(now)
    sight_unreachable(now)
    return [node.hostname for node in marked]
