"""Telemetry's part of ``/metrics`` (apps/core/metrics.py), one module per family of series:
dcgm-exporter's names for each GPU's newest sample (``dcgm``), each GPU's XID counts (``xids``),
node_exporter's names for each InfiniBand port's newest sample (``infiniband``), the ingest's own
health (``ingest_health``)."""
