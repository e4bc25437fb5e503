"""Inventory import: one YAML or JSON document of clusters, node types, racks, fabrics, switches,
nodes (with GPUs and ports), links and NVLinks, applied all or nothing.

Validation runs in layers and reports every problem with the path of its record: the document's
structure (schema.py), then references, duplicates and conflicts with the database, then each
row's field formats (plan.py, over the stored rows the document names, which stored.py loads).
Only a document without problems is written (apply.py), in one transaction. A dry run does the
same writes and rolls them back, so its diff is exactly what a real run would do. The format is
described in docs/inventory-import.md.
"""

import logging
from typing import Any

from django.db import DataError, IntegrityError, transaction

from apps.core import integrity
from apps.inventory.importer.apply import apply_plan
from apps.inventory.importer.diff import Change, ImportResult
from apps.inventory.importer.errors import DOCUMENT, ImportFailed, Issue
from apps.inventory.importer.loading import Format, load_document
from apps.inventory.importer.plan import plan_import
from apps.inventory.importer.schema import Document, convert_document
from apps.inventory.importer.stored import load_stored_state

logger = logging.getLogger(__name__)
DATABASE_LIMIT = "a value is beyond what the database can hold (too long or out of range)"

__all__ = [
    "Change",
    "Document",
    "Format",
    "ImportFailed",
    "ImportResult",
    "Issue",
    "import_inventory",
    "load_document",
]


def import_inventory(raw: Any, *, dry_run: bool = False, actor: str, user: Any = None) -> ImportResult:
    """Apply a parsed document (see ``load_document``), or raise ImportFailed with every problem.

    ``actor`` (and ``user``) are recorded on the lifecycle history of the nodes it creates.
    """
    document = convert_document(raw)
    try:
        with transaction.atomic():
            plan = plan_import(document, load_stored_state(document), dry_run=dry_run)
            apply_plan(plan, actor=actor, user=user)
            if dry_run:
                transaction.set_rollback(True)
    except (IntegrityError, DataError) as exc:
        # The checks above cover what the file can get wrong; this is a concurrent writer that got
        # there first, or a limit of the database. The transaction is rolled back either way. The
        # caller reads what was refused in words; the database's message goes to the log.
        logger.warning("inventory import by %s: the database refused it: %s", actor, exc)
        reason = integrity.explain(exc).message() if isinstance(exc, IntegrityError) else DATABASE_LIMIT
        raise ImportFailed(
            [Issue(DOCUMENT, f"the database refused the import, nothing was written: {reason}")]
        ) from exc
    return plan.result
