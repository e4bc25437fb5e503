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
        from apps.failures.watch import telemetry_watch

        # Stored telemetry raises failures: counters that moved (ECC, row remapping, recovery action)
        # and conditions that last (thermal and power-brake throttling, rows still pending or failed).
        process.add(telemetry_watch)
        events.subscribe(events.TelemetryStored, telemetry_watch.telemetry_stored)
        registry.register(metrics.collect)  # the failures still being worked on, in /metrics
