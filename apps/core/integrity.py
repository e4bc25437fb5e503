"""What a database's IntegrityError means, in words a client may read: which kind of constraint
refused the change, on which model, and the fields it concerns where the database says so (a
unique or not-null column, a named constraint of a model's Meta). Never the database's own message,
which quotes tables, constraint names and the refused values.

PostgreSQL (psycopg) reports the table, column and constraint as diagnostics; SQLite only in its
message (``UNIQUE constraint failed: inventory_node.hostname``), whose ``table.column`` list is
read here and nothing else of it.
"""

import re
from dataclasses import dataclass

from django.apps import apps
from django.db import IntegrityError, models
from django.db.models import Q

UNIQUE, FOREIGN_KEY, NOT_NULL, CHECK = "unique", "foreign key", "not null", "check"
_POSTGRES_KINDS = {"23505": UNIQUE, "23503": FOREIGN_KEY, "23502": NOT_NULL, "23514": CHECK}
_SQLITE_KINDS = {
    "SQLITE_CONSTRAINT_UNIQUE": UNIQUE,
    "SQLITE_CONSTRAINT_PRIMARYKEY": UNIQUE,
    "SQLITE_CONSTRAINT_FOREIGNKEY": FOREIGN_KEY,
    "SQLITE_CONSTRAINT_NOTNULL": NOT_NULL,
    "SQLITE_CONSTRAINT_CHECK": CHECK,
}
_SQLITE_COLUMN = re.compile(r"(\w+)\.(\w+)")


@dataclass(frozen=True)
class Refusal:
    kind: str | None  # UNIQUE, FOREIGN_KEY, NOT_NULL, CHECK; None when the database did not say
    model: type[models.Model] | None = None
    fields: tuple[str, ...] = ()

    def message(self) -> str:
        """One sentence for the client: what was refused and, where known, on which fields."""
        thing = self.model._meta.verbose_name if self.model else "row"
        fields = " and ".join(self.fields)
        if self.kind == UNIQUE:
            if fields:
                return f"Another {thing} already has this {fields}."
            return f"The change conflicts with another {thing}: a value that must be unique is taken."
        if self.kind == FOREIGN_KEY:
            target = fields or "row"
            return f"The change refers to a {target} that does not exist (it may just have been deleted)."
        if self.kind == NOT_NULL:
            if fields:
                return f"The {thing}'s {fields} may not be empty."
            return f"A field of the {thing} that may not be empty is empty."
        if self.kind == CHECK:
            where = f" on {fields}" if fields else ""
            return f"The change breaks a rule{where} that every {thing} must keep."
        return "The database refused the change as conflicting with the stored data."


def explain(exc: IntegrityError) -> Refusal:
    """What the database refused, as far as it says."""
    cause = exc.__cause__
    diag = getattr(cause, "diag", None)
    if diag is not None:  # psycopg
        kind = _POSTGRES_KINDS.get(getattr(cause, "sqlstate", None) or "")
        model = _model_of_table(diag.table_name)
        return Refusal(kind, model, _postgres_fields(kind, model, diag.column_name, diag.constraint_name))
    kind = _SQLITE_KINDS.get(getattr(cause, "sqlite_errorname", None) or "")
    text = str(cause or exc)
    if kind == CHECK:
        model, fields = _check_constraint(text.rpartition(": ")[2].strip())
        return Refusal(kind, model, fields)
    columns = _SQLITE_COLUMN.findall(text.partition(": ")[2]) if kind in (UNIQUE, NOT_NULL) else []
    model = _model_of_table(columns[0][0]) if columns else None
    return Refusal(kind, model, _fields_of_columns(model, [column for _, column in columns]))


def _model_of_table(table: str | None) -> type[models.Model] | None:
    return next((model for model in apps.get_models() if model._meta.db_table == table), None)


def _fields_of_columns(model: type[models.Model] | None, columns: list[str]) -> tuple[str, ...]:
    if model is None:
        return ()
    by_column = {f.column: f.name for f in model._meta.concrete_fields}
    return tuple(by_column[column] for column in columns if column in by_column)


def _postgres_fields(
    kind: str | None, model: type[models.Model] | None, column: str | None, constraint: str | None
) -> tuple[str, ...]:
    if model is None:
        return ()
    if kind == NOT_NULL and column:
        return _fields_of_columns(model, [column])
    if kind == CHECK and constraint:
        return _check_constraint(constraint)[1]
    if kind == UNIQUE and constraint:
        for declared in model._meta.constraints:
            if isinstance(declared, models.UniqueConstraint) and declared.name == constraint:
                return tuple(declared.fields)
    if kind in (UNIQUE, FOREIGN_KEY) and constraint:
        # Constraints Django names itself start with the table and the column: hostname's unique
        # constraint is inventory_node_hostname_key, cluster's foreign key inventory_node_cluster_id_....
        named = [f for f in model._meta.concrete_fields if constraint.startswith(f"{model._meta.db_table}_{f.column}_")]
        if named:  # the longest column wins: rack_position, not rack, for ..._rack_position_key
            return (max(named, key=lambda f: len(f.column)).name,)
    return ()


def _check_constraint(name: str) -> tuple[type[models.Model] | None, tuple[str, ...]]:
    """The model that declares the check constraint ``name``, and the fields its condition reads."""
    for model in apps.get_models():
        for declared in model._meta.constraints:
            if isinstance(declared, models.CheckConstraint) and declared.name == name:
                return model, _condition_fields(declared.condition)
    return None, ()


def _condition_fields(condition: Q) -> tuple[str, ...]:
    """The fields a condition's lookups name (``oversubscription_ratio__gte`` reads oversubscription_ratio)."""
    names: dict[str, None] = {}  # in the order the condition names them
    for child in condition.children:
        if isinstance(child, Q):
            names.update(dict.fromkeys(_condition_fields(child)))
        elif isinstance(child, tuple):
            names[child[0].split("__")[0]] = None
    return tuple(names)
