"""What the telemetry models share: a node reference without a database constraint, and bulk inserts
into daily partitions."""

from collections.abc import Iterable
from typing import Any

from django.db import connections, models, transaction

from apps.inventory.models import Node
from apps.telemetry.partitions import day_of, partition_days


def node_without_constraint(*, on_delete: object, related_name: str) -> models.ForeignKey:
    """A node foreign key the database does not enforce (no constraint, no index of its own).

    A constraint would fire a lookup trigger for every copied row, and deleting a node would cascade
    through a billion rows inside one request: rows of a deleted node age out with retention instead.
    Small per-node tables (cursor, newest samples, hourly rollups) cascade in the ORM when a node is
    deleted, still without a database constraint, so a node deleted mid-batch cannot fail the
    transaction that also carries every other node's samples.
    """
    return models.ForeignKey(Node, on_delete=on_delete, db_constraint=False, related_name=related_name, db_index=False)


def node_primary_key(*, related_name: str) -> models.OneToOneField:
    """A node as the primary key of a table of one row per node (its newest samples): deleting the node
    deletes the row in the ORM, without a database constraint, as ``node_without_constraint`` says."""
    return models.OneToOneField(
        Node, on_delete=models.CASCADE, primary_key=True, db_constraint=False, related_name=related_name
    )


class PartitionedQuerySet(models.QuerySet):
    """Rows of a table split into daily partitions on PostgreSQL (partitions.py) by the model's
    ``PARTITIONED_BY`` column: ``bulk_create`` first makes sure the rows' days have their partitions."""

    def bulk_create(self, objs: Iterable[models.Model], *args: Any, **kwargs: Any) -> list[models.Model]:
        objs = list(objs)
        connection = connections[self.db]
        if not objs or connection.vendor != "postgresql":
            return super().bulk_create(objs, *args, **kwargs)
        column = self.model.PARTITIONED_BY
        with transaction.atomic(using=self.db), connection.cursor() as cursor:
            partition_days.make_room(cursor, self.model._meta.db_table, {day_of(getattr(o, column)) for o in objs})
            return super().bulk_create(objs, *args, **kwargs)
