"""The bulky parts of the Celery settings (settings.py names them all): the broker's transport
options, the queues and which app's tasks go to which, and beat's schedule."""

from typing import Any

from celery.schedules import crontab
from kombu import Queue

from controlplane.env import env_int, env_str

# Every queue a task may name. A worker started without -Q consumes all of them; a queue missing here
# would hold its messages with no worker to read them (tests/test_settings.py checks every task's queue).
# default: orchestration; maintenance: purges, retention; telemetry: rollups, straggler flags.
# gateway: the liveness sweep, on its own so that a backlog of slow work never delays it.
# jobs: runs and commands (starting runs, sending commands, their deadlines, judging).
TASK_QUEUES = [Queue("default"), Queue("maintenance"), Queue("telemetry"), Queue("gateway"), Queue("jobs")]
# Each app's tasks go to one queue, so a backlog of rollups never delays an audit purge or a burn-in.
TASK_ROUTES = {
    "apps.accounts.tasks.*": {"queue": "maintenance"},
    "apps.failures.tasks.*": {"queue": "telemetry"},
    "apps.telemetry.tasks.*": {"queue": "telemetry"},
    "apps.gateway.tasks.*": {"queue": "gateway"},
    "apps.jobs.tasks.*": {"queue": "jobs"},
    "apps.burnin.tasks.*": {"queue": "jobs"},
}


def broker_transport(broker_url: str) -> str | None:
    """kombu's Redis transport with the repair in controlplane/broker.py, for a redis:// broker. A rediss://
    or another broker keeps kombu's own (its scheme picks it, and rediss:// its TLS defaults)."""
    return "controlplane.broker:Transport" if broker_url.startswith("redis://") else None


def broker_transport_options() -> dict[str, Any]:
    return {
        # Every Redis key and channel of the broker starts with this, so that installations can share one
        # Redis database (the demo derives one from its var directory).
        "global_keyprefix": env_str("CELERY_KEY_PREFIX", ""),
        # How long a message taken by a worker and not yet acknowledged stays with it. acks_late tasks
        # (apps/jobs) are acknowledged only when done, so a worker killed with -9 leaves its message
        # unacknowledged, and Redis hands it to a worker again after this. It must exceed the longest
        # task's hard time limit (60 s), or a task still running would be delivered to a second worker too.
        # Those tasks are idempotent, and the jobs sweep redoes their work sooner; this is the backstop.
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT_S", 300, minimum=120),
    }


def beat_schedule(*, liveness_sweep_s: int, jobs_sweep_s: int, burnin_sweep_s: int) -> dict[str, dict[str, Any]]:
    """Installed into the database scheduler on beat's start; times are UTC (CELERY_TIMEZONE)."""
    return {
        "gateway-sweep-liveness": {
            "task": "apps.gateway.tasks.sweep_liveness",
            "schedule": liveness_sweep_s,
            "options": {"expires": liveness_sweep_s},
        },
        "jobs-sweep": {
            "task": "apps.jobs.tasks.sweep",
            "schedule": jobs_sweep_s,
            "options": {"expires": jobs_sweep_s},
        },
        "burnin-sweep": {
            "task": "apps.burnin.tasks.sweep",
            "schedule": burnin_sweep_s,
            "options": {"expires": burnin_sweep_s},
        },
        "purge-audit-log": {"task": "apps.accounts.tasks.purge_audit_log", "schedule": crontab(hour=3, minute=17)},
        "accounts-forget-stale-throttles": {
            "task": "apps.accounts.tasks.forget_stale_throttles",
            "schedule": 3600.0,
            "options": {"expires": 3600},
        },
        "failures-flag-stragglers": {
            "task": "apps.failures.tasks.flag_stragglers",
            "schedule": 30.0,
            "options": {"expires": 30},
        },
        "telemetry-rollup-minutes": {
            "task": "apps.telemetry.tasks.roll_up_minutes",
            "schedule": 60.0,
        },
        "telemetry-rollup-hours": {
            "task": "apps.telemetry.tasks.roll_up_hours",
            "schedule": 300.0,
        },
        "telemetry-retention": {
            "task": "apps.telemetry.tasks.apply_retention",
            "schedule": 600.0,
        },
        "telemetry-partitions": {
            "task": "apps.telemetry.tasks.create_partitions",
            "schedule": 3600.0,
        },
    }
