import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.accounts.audit import record
from apps.inventory.importer import ImportFailed, import_inventory, load_document

ACTOR = "system:import_inventory"


class Command(BaseCommand):
    help = (
        "Import clusters, node types, racks, fabrics, switches, nodes, GPUs, ports, links and NVLinks from one "
        "YAML or JSON document (see docs/inventory-import.md). All or nothing; running it twice changes nothing "
        "the second time; it never deletes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="A .yaml/.yml or .json file, or - to read YAML or JSON from stdin.")
        parser.add_argument("--dry-run", action="store_true", help="Show what would change and write nothing.")
        parser.add_argument(
            "--format", choices=["text", "json"], default="text", help="Output: a readable diff or JSON."
        )

    def handle(self, *args: Any, file: str, dry_run: bool, format: str, **options: Any) -> None:
        if file == "-":
            text, syntax = sys.stdin.buffer.read(), "yaml"  # YAML reads JSON documents too
        else:
            try:
                text = Path(file).read_bytes()
            except OSError as exc:
                raise CommandError(f"Cannot read {file}: {exc.strerror}.") from exc
            syntax = "json" if file.endswith(".json") else "yaml"
        try:
            result = import_inventory(load_document(text, syntax), dry_run=dry_run, actor=ACTOR)
        except ImportFailed as exc:
            self._report_errors(exc, format)
            raise CommandError(str(exc)) from exc
        if not dry_run:
            record("inventory.import", actor=ACTOR, source=file, **result.counts())
        if format == "json":
            self.stdout.write(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
        else:
            self.stdout.write("\n".join(result.render()))

    def _report_errors(self, exc: ImportFailed, format: str) -> None:
        if format == "json":
            self.stdout.write(json.dumps({"errors": [{"path": i.path, "message": i.message} for i in exc.issues]}))
        else:
            self.stderr.write("\n".join(str(issue) for issue in exc.issues))
