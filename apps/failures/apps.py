from django.apps import AppConfig


class FailuresConfig(AppConfig):
    name = "apps.failures"
    label = "failures"
    verbose_name = "Failures and stragglers"

    def ready(self) -> None:
        from apps.core import events
        from apps.core.metrics import registry
        from apps.core.process import process
        from apps.failures import metrics
        from apps.failures.counters import counter_watch

        # Counters in stored telemetry (ECC, row remapping, recovery action) raise failures.
        process.add(counter_watch)
        events.subscribe(events.TelemetryStored, counter_watch.telemetry_stored)
        registry.register(metrics.collect)  # the failures still being worked on, in /metrics
