"""Many rows updated each to values of its own, in one statement per few hundred rows.

Django's ``bulk_update`` writes a ``CASE WHEN pk = ... THEN ...`` per row and field, each built as
an expression object in Python: for a batch of a thousand agents' records that building cost more
than the database's work. ``UPDATE ... FROM (VALUES ...)`` takes the rows as plain parameters;
PostgreSQL and SQLite (3.33 on) both run it.
"""

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.db.models import Model

# Parameters a statement at most: under SQLite's limit (32,766 since 3.32) and PostgreSQL's (65,535).
_MAX_PARAMETERS = 1200


def update_from_values(
    cursor: CursorWrapper,
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    set_sql: str,
    where_sql: str,
    params: Sequence[Any] = (),
) -> None:
    """``UPDATE table SET set_sql FROM v WHERE where_sql``, where ``v (columns)`` holds ``rows``; the
    SQL fragments name the table and ``v``, and their own placeholders take ``params`` (after the rows).

    Rows are sent in the order given: whoever must lock rows in some order sorts them first."""
    per_statement = max(1, (_MAX_PARAMETERS - len(params)) // len(columns))
    row_sql = f"({', '.join(['%s'] * len(columns))})"
    for start in range(0, len(rows), per_statement):
        chunk = rows[start : start + per_statement]
        cursor.execute(
            f"WITH v ({', '.join(columns)}) AS (VALUES {', '.join([row_sql] * len(chunk))}) "
            f"UPDATE {table} SET {set_sql} FROM v WHERE {where_sql}",
            [*(value for row in chunk for value in row), *params],
        )


def update_rows(rows: Sequence[Model], fields: Sequence[str]) -> None:
    """Django's ``bulk_update(rows, fields)`` as ``update_from_values``: each value prepared by its field
    (JSON, datetimes), and cast to its column's type in the SET (a column of NULLs in a VALUES list
    would be text). The rows are of one model and saved already; they are written in the order given."""
    if not rows:
        return
    meta = rows[0]._meta
    quote = connection.ops.quote_name
    table, pk = quote(meta.db_table), meta.pk
    written = [meta.get_field(name) for name in fields]
    set_sql = ", ".join(
        f"{quote(field.column)} = CAST(v.{quote(field.column)} AS {field.cast_db_type(connection)})"
        for field in written
    )
    values = [
        (row.pk, *(field.get_db_prep_save(getattr(row, field.attname), connection) for field in written))
        for row in rows
    ]
    with connection.cursor() as cursor:
        update_from_values(
            cursor,
            table,
            [quote(pk.column), *(quote(field.column) for field in written)],
            values,
            set_sql=set_sql,
            where_sql=f"{table}.{quote(pk.column)} = v.{quote(pk.column)}",
        )
