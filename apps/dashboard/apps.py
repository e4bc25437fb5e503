from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "apps.dashboard"
    label = "dashboard"
    verbose_name = "Dashboard"

    def ready(self) -> None:
        from apps.core import events
        from apps.dashboard import publish

        # Browsers hear of node and failure changes once they are committed (apps/core/events.py).
        events.subscribe(events.NodeChanged, publish.node_changed)
        events.subscribe(events.FailureChanged, publish.failure_changed)
