from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    verbose_name = "Runs and commands"

    def ready(self) -> None:
        # Registered with Celery in every process, the web server's included: queue.py sends them by name.
        from apps.jobs import tasks  # noqa: F401
