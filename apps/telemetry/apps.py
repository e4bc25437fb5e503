from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "apps.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from apps.core.metrics import registry
        from apps.core.process import process
        from apps.telemetry.ingest import ingestor
        from apps.telemetry.metrics import dcgm, infiniband, ingest_health, xids
        from apps.telemetry.partitions import partition_days

        process.add(ingestor)  # shut down with the server process: what is pending is written first
        process.add(partition_days)  # the days known to have partitions are forgotten
        registry.register(dcgm.collect)
        registry.register(xids.collect)
        registry.register(infiniband.collect)
        registry.register(ingest_health.collect, scope="control_plane")
