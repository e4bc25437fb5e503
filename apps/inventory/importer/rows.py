"""Planning rows by natural key, the bookkeeping every section of the import shares: a natural key
claimed by the first record that uses it, references resolved with a suggestion for a near miss, and
each row created or updated with what changed, checked by the model's own field validation and
counted in the result. Problems are collected, not raised, so that one run lists them all.
"""

import enum
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import models

from apps.inventory.importer.diff import ImportResult, display
from apps.inventory.importer.errors import Issue, did_you_mean
from apps.inventory.importer.schema import UNSET, Record
from apps.inventory.importer.stored import Port
from apps.inventory.models.fabric import Link

M = TypeVar("M", bound=models.Model)


@dataclass
class Plan:
    """What an import will write: new rows and changed stored rows (with the fields that changed) by
    model, and the two ports of each new link; and what it reports."""

    result: ImportResult
    creates: dict[type[models.Model], list[models.Model]] = field(default_factory=lambda: defaultdict(list))
    updates: dict[type[models.Model], list[tuple[models.Model, list[str]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    link_ends: list[tuple[Link, Port, Port]] = field(default_factory=list)


def record_values(record: Record, *names: str) -> dict[str, Any]:
    """The record's fields by name, UNSET where it leaves one out (``upsert`` then keeps the stored value)."""
    return {name: getattr(record, name) for name in names}


class PlanBuilder:
    """A plan being made, and the problems found on the way."""

    def __init__(self, *, dry_run: bool) -> None:
        self.plan = Plan(ImportResult(dry_run=dry_run))
        self.issues: list[Issue] = []
        self.first_use: dict[tuple[Any, ...], str] = {}
        # Records of this file that were refused, as (what, key): references to them add no error.
        self.refused: set[tuple[str, Any]] = set()

    def error(self, path: str, message: str) -> None:
        self.issues.append(Issue(path, message))

    def claim(self, key: tuple[Any, ...], path: str, subject: str, field: str = "") -> bool:
        """True for the first record of the file to use a natural key; a later one is an error (at its
        ``field``) that names the first record."""
        first = self.first_use.setdefault(key, path)
        if first != path:
            self.error(f"{path}.{field}" if field else path, f"{subject} {first}")
            return False
        return True

    def ref(self, registry: dict[Any, M], key: Any, path: str, what: str) -> M | None:
        """The row a record refers to, or an error naming the reference (none for a record of this file
        that was refused: its own error says why, and one mistake should read as one)."""
        found = registry.get(key)
        if found is None and (what, key) not in self.refused:
            known = [k[-1] if isinstance(k, tuple) else k for k in registry]
            self.error(path, f"no {what} {key!r} in this file or the database{did_you_mean(key, known)}")
        return found

    def upsert(
        self,
        model: type[M],
        stored: M | None,
        key_values: dict[str, Any],
        values: dict[str, Any],
        *,
        key: str,
        path: str,
    ) -> M:
        """The stored row updated with ``values``, or a new one; counted and checked either way.
        ``key_values`` (the natural key) are set only on a new row: a stored one already has them."""
        creating = stored is None
        obj = model() if stored is None else stored
        given = key_values | values if creating else values
        changes = self._assign(obj, {k: v for k, v in given.items() if v is not UNSET}, path, creating)
        if creating or changes:
            self._full_clean(obj, path, None if creating else changes)
        if creating:
            self.plan.creates[model].append(obj)
        elif changes:
            self.plan.updates[model].append((obj, list(changes)))
        action = "create" if creating else "update" if changes else None
        self.plan.result.record(model._meta.model_name, key, action, changes)
        return obj

    def _assign(self, obj: models.Model, values: dict[str, Any], path: str, creating: bool) -> dict[str, list[Any]]:
        changes: dict[str, list[Any]] = {}
        for name, value in values.items():
            model_field = obj._meta.get_field(name)
            if model_field.is_relation:
                stored_pk = None if creating else getattr(obj, model_field.attname)
                # A row this import creates has no pk yet: referring to it is always a change.
                same = stored_pk is None if value is None else value.pk is not None and value.pk == stored_pk
                if not creating and same:
                    continue
                old = getattr(obj, name) if stored_pk is not None else None
                setattr(obj, name, value)
            else:
                try:
                    value = model_field.to_python(value.value if isinstance(value, enum.Enum) else value)
                except ValidationError as exc:
                    self.error(f"{path}.{name}", " ".join(exc.messages))
                    continue
                old = None if creating else getattr(obj, model_field.attname)
                if not creating and value == old:
                    continue
                setattr(obj, model_field.attname, value)
            changes[name] = [display(old), display(value)]
        return changes

    def _full_clean(self, obj: models.Model, path: str, changed: Iterable[str] | None) -> None:
        """The model's field validation (formats, lengths, ranges) on the fields this import sets.
        References and uniqueness are the planner's own checks, made against the file as a whole."""
        concrete = obj._meta.concrete_fields
        exclude = {f.name for f in concrete if f.is_relation}
        if changed is not None:
            exclude |= {f.name for f in concrete} - set(changed)
        try:
            obj.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            for name, messages in exc.message_dict.items():
                self.error(path if name == NON_FIELD_ERRORS else f"{path}.{name}", " ".join(messages))
