"""Many rows updated each to values of its own, in one statement per few hundred rows.

Django's ``bulk_update`` writes a ``CASE WHEN pk = ... THEN ...`` per row and field, each built as
an expression object in Python: for a batch of a thousand agents' records that building cost more
than the database's work. ``UPDATE ... FROM (VALUES ...)`` takes the rows as plain parameters;
PostgreSQL and SQLite (3.33 on) both run it.
"""

from collections.abc import Sequence
from typing import Any

from django.db.backends.utils import CursorWrapper

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
