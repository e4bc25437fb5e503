from django.conf import settings

from apps.failures import tasks
from tests.celery_routing import queue_of


def test_the_straggler_task_runs_on_the_telemetry_queue_within_its_time_limits():
    task = tasks.flag_stragglers
    assert queue_of(task.name) == "telemetry"
    assert (task.soft_time_limit, task.time_limit) == (25, 30)


def test_beat_runs_it_every_30_seconds_and_drops_a_run_that_could_not_start_in_time():
    entry = settings.CELERY_BEAT_SCHEDULE["failures-flag-stragglers"]
    assert entry["task"] == tasks.flag_stragglers.name
    assert entry["schedule"] == 30.0
    assert entry["options"] == {"expires": 30}


def test_it_reports_what_changed(db, monkeypatch):
    class Changes:
        raised, refreshed, cleared = [object()], [], [object(), object()]

    monkeypatch.setattr(tasks, "detect_stragglers", lambda now: Changes)
    assert tasks.flag_stragglers() == {"raised": 1, "refreshed": 0, "cleared": 2}
