# Written by hand on 2026-12-02.
"""The newest samples become one row per node with its GPUs (or ports) packed as the raw row packs them
(docs/telemetry-storage.md), instead of one wide row per GPU or port: every existing newest row is
carried over, a node's GPUs (ports) packed together at its newest one's time, and the old tables go.
Going back unpacks them into one row per GPU (port) again.

On PostgreSQL the new tables are UNLOGGED with a fillfactor of 50, as the old ones were (0002, 0005):
the writer rewrites every row every few seconds, and a crash loses nothing the next batches do not
write again.
"""

import itertools

import django.db.models.deletion
from django.db import migrations, models

from agents import protocol
from apps.telemetry.models.samples import GPU_FIELDS, GPU_PACKING, PORT_PACKING, PORT_SAMPLE_FIELDS, pack, unpack

CHUNK = 2_000
# (wide model, per-node model, packed column, protocol struct, packing, stored fields, wide item key)
TABLES = (
    ("WideLatestGpuSample", "LatestGpuSample", "gpus", protocol.GpuSample, GPU_PACKING, GPU_FIELDS, ("gpu_index",)),
    (
        "WideLatestPortSample",
        "LatestPortSample",
        "ports",
        protocol.PortSample,
        PORT_PACKING,
        PORT_SAMPLE_FIELDS,
        ("device", "port"),
    ),
)
# The wide rows name a GPU's index gpu_index; the protocol (and so the packing) names it index.
WIDE_NAMES = {"index": "gpu_index"}


def pack_nodes(apps, schema_editor):
    using = schema_editor.connection.alias
    for wide_name, name, packed, struct, packing, fields, key in TABLES:
        wide, latest = apps.get_model("telemetry", wide_name), apps.get_model("telemetry", name)
        columns = [WIDE_NAMES.get(f, f) for f in fields]
        rows = wide.objects.using(using).order_by("node_id", *key).values_list("node_id", "ts", "received_at", *columns)
        made = []
        for node_id, group in itertools.groupby(rows.iterator(CHUNK), key=lambda row: row[0]):
            group = list(group)
            structs = [struct(**dict(zip(fields, row[3:], strict=True))) for row in group]
            newest = max(group, key=lambda row: row[1])
            made.append(latest(node_id=node_id, ts=newest[1], received_at=newest[2], **{packed: pack(packing, structs)}))
            if len(made) >= CHUNK:
                latest.objects.using(using).bulk_create(made)
                made = []
        latest.objects.using(using).bulk_create(made)


def unpack_nodes(apps, schema_editor):
    using = schema_editor.connection.alias
    for wide_name, name, packed, struct, packing, fields, _ in TABLES:
        wide, latest = apps.get_model("telemetry", wide_name), apps.get_model("telemetry", name)
        made = []
        for row in latest.objects.using(using).iterator(CHUNK):
            for item in unpack(packing, struct, getattr(row, packed)):
                values = {WIDE_NAMES.get(f, f): getattr(item, f) for f in fields}
                made.append(wide(node_id=row.node_id, ts=row.ts, received_at=row.received_at, **values))
            if len(made) >= CHUNK:
                wide.objects.using(using).bulk_create(made)
                made = []
        wide.objects.using(using).bulk_create(made)


def tune(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in ("telemetry_latestgpusample", "telemetry_latestportsample"):
            schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = 50), SET UNLOGGED")


def latest_model(name: str, packed: str, help_text: str, related_name: str) -> migrations.CreateModel:
    return migrations.CreateModel(
        name=name,
        fields=[
            ("ts", models.DateTimeField(help_text="When the agent took the sample.")),
            ("received_at", models.DateTimeField(help_text="When the server stored the batch holding this sample.")),
            (
                "node",
                models.OneToOneField(
                    db_constraint=False,
                    on_delete=django.db.models.deletion.CASCADE,
                    primary_key=True,
                    related_name=related_name,
                    serialize=False,
                    to="inventory.node",
                ),
            ),
            (packed, models.BinaryField(help_text=help_text)),
        ],
        options={"abstract": False},
    )


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0002_burn_in_results"),
        ("telemetry", "0009_cursor_seq_before"),
    ]

    operations = [
        migrations.RenameModel("LatestGpuSample", "WideLatestGpuSample"),
        migrations.RenameModel("LatestPortSample", "WideLatestPortSample"),
        latest_model("LatestGpuSample", "gpus", "Every GPU's newest reading, packed (GPU_PACKING).", "latest_gpus"),
        latest_model("LatestPortSample", "ports", "Every port's newest reading, packed (PORT_PACKING).", "latest_ports"),
        migrations.RunPython(tune, migrations.RunPython.noop),
        migrations.RunPython(pack_nodes, unpack_nodes),
        migrations.DeleteModel("WideLatestGpuSample"),
        migrations.DeleteModel("WideLatestPortSample"),
    ]
