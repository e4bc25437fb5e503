from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "apps.dashboard"
    label = "dashboard"
    verbose_name = "Dashboard"

    def ready(self) -> None:
        from apps.core import events
        from apps.core.process import process
        from apps.dashboard.live_streams import live_streams

        process.add(live_streams.fleet)  # before the live streams: it stops before their snapshot thread
        process.add(live_streams)
        # Browsers hear of stored telemetry, and of node, failure and run changes, once they are committed.
        events.subscribe(events.TelemetryStored, live_streams.telemetry.telemetry_stored)
        events.subscribe(events.NodeChanged, live_streams.changes.node_changed)
        events.subscribe(events.FailureChanged, live_streams.changes.failure_changed)
        events.subscribe(events.RunChanged, live_streams.changes.run_changed)
        events.subscribe(events.CommandsChanged, live_streams.changes.commands_changed)
