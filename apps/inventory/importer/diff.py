"""What an import did (or, in a dry run, would do): counts per model and one change per row written."""

import enum
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from django.apps import apps
from django.db import models

Action = Literal["create", "update"]


def display(value: Any) -> Any:
    """A field value as a person reads it and JSON can carry it: a related row by its name."""
    if isinstance(value, models.Model):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Decimal):
        return str(value)
    return value


@dataclass
class Change:
    model: str
    key: str
    action: Action
    fields: dict[str, list[Any]]  # name -> [old, new]; old is None on create

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "key": self.key, "action": self.action, "fields": self.fields}

    def render(self) -> str:
        if self.action == "create":
            return f"+ {self.model} {self.key}"
        changed = ", ".join(f"{name}: {_text(old)} -> {_text(new)}" for name, (old, new) in self.fields.items())
        return f"~ {self.model} {self.key} {changed}"


@dataclass
class ImportResult:
    dry_run: bool
    created: Counter[str] = field(default_factory=Counter)
    updated: Counter[str] = field(default_factory=Counter)
    unchanged: Counter[str] = field(default_factory=Counter)
    changes: list[Change] = field(default_factory=list)

    def record(self, model: str, key: str, action: Action | None, fields: dict[str, list[Any]]) -> None:
        """Count one record of the document; ``action`` None means it matched the database."""
        if action is None:
            self.unchanged[model] += 1
            return
        (self.created if action == "create" else self.updated)[model] += 1
        self.changes.append(Change(model, key, action, fields))

    def counts(self) -> dict[str, dict[str, int]]:
        """Rows per model created and updated, and records that matched: what the audit log keeps."""
        return {"created": dict(self.created), "updated": dict(self.updated), "unchanged": dict(self.unchanged)}

    def as_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, **self.counts(), "changes": [change.as_dict() for change in self.changes]}

    def summary(self) -> str:
        """``Created 16 nodes, 128 gpus; updated nothing; 3 unchanged.`` (``Would create`` in a dry run)."""
        verbs = ("Would create", "would update") if self.dry_run else ("Created", "updated")
        parts = [
            f"{verb} {_counts(counter)}" for verb, counter in zip(verbs, (self.created, self.updated), strict=True)
        ]
        unchanged = sum(self.unchanged.values())
        tail = " (dry run: nothing was written)" if self.dry_run else ""
        return f"{'; '.join(parts)}; {unchanged} unchanged.{tail}"

    def render(self) -> list[str]:
        return [change.render() for change in self.changes] + [self.summary()]


def _counts(counter: Counter[str]) -> str:
    """``16 nodes, 1 node type`` from {"node": 16, "nodetype": 1}."""
    nouns = []
    for model_name, count in counter.items():
        meta = apps.get_model("inventory", model_name)._meta
        nouns.append(f"{count} {meta.verbose_name if count == 1 else meta.verbose_name_plural}")
    return ", ".join(nouns) or "nothing"


def _text(value: Any) -> str:
    return '""' if value == "" else "null" if value is None else str(value)
