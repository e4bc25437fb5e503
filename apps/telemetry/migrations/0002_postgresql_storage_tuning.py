"""PostgreSQL-only storage tuning the model layer cannot express portably.

- BRIN indexes on the raw tables' ``ts`` and ``received_at`` and on the minute rollups' ``bucket``:
  rows arrive in roughly time order, so a BRIN index (a few pages) lets retention and rollups
  find a time range without a second B-tree being updated on every copied row.
- ``fillfactor`` on the small tables that are rewritten all the time (newest sample, cursors), so
  their updates stay on the same page (HOT) and touch no index.
- The newest-sample table is UNLOGGED: it is a cache of the raw table that the writer refreshes
  every few seconds, so it need not be written twice (WAL). After a crash PostgreSQL empties it and
  the next batches fill it again; a standby does not have it.

On SQLite (the demo) none of this applies and the operations do nothing.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

FORWARD = [
    "CREATE INDEX gpusample_ts_brin ON telemetry_gpusample USING brin (ts)",
    "CREATE INDEX gpusample_received_brin ON telemetry_gpusample USING brin (received_at)",
    "CREATE INDEX portsample_ts_brin ON telemetry_portsample USING brin (ts)",
    "CREATE INDEX gpuminuterollup_bucket_brin ON telemetry_gpuminuterollup USING brin (bucket)",
    "ALTER TABLE telemetry_latestgpusample SET (fillfactor = 50)",
    "ALTER TABLE telemetry_telemetrycursor SET (fillfactor = 50)",
    "ALTER TABLE telemetry_latestgpusample SET UNLOGGED",
]
BACKWARD = [
    "DROP INDEX IF EXISTS gpusample_ts_brin",
    "DROP INDEX IF EXISTS gpusample_received_brin",
    "DROP INDEX IF EXISTS portsample_ts_brin",
    "DROP INDEX IF EXISTS gpuminuterollup_bucket_brin",
    "ALTER TABLE telemetry_latestgpusample RESET (fillfactor)",
    "ALTER TABLE telemetry_telemetrycursor RESET (fillfactor)",
    "ALTER TABLE telemetry_latestgpusample SET LOGGED",
]


def _run_on_postgresql(statements: list[str]) -> object:
    def run(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0001_initial")]

    operations = [migrations.RunPython(_run_on_postgresql(FORWARD), _run_on_postgresql(BACKWARD))]
