"""``POST /api/v1/inventory/import``: the inventory document of ``manage.py import_inventory`` over HTTP."""

from dataclasses import dataclass
from typing import IO, Any

import msgspec
from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.audit import describe
from apps.accounts.roles import Role
from apps.core.api.exceptions import body_too_large
from apps.inventory.importer import Document, Format, ImportFailed, import_inventory, load_document

# The audit log keeps the first problems of a refused import, enough to see what went wrong.
AUDITED_ISSUES = 20


@dataclass
class DocumentText:
    text: bytes
    syntax: Format


class DocumentParser(BaseParser):
    """Hands the body to the importer as it came, so that a syntax error is reported with its line and
    column in the same error list as every other problem."""

    syntax: Format = "yaml"

    def parse(self, stream: IO[bytes], media_type: str | None = None, parser_context: Any = None) -> DocumentText:
        # DRF streams the body past Django's request.body, and with it past DATA_UPLOAD_MAX_MEMORY_SIZE.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        text = stream.read(limit + 1)
        if len(text) > limit:
            raise body_too_large()
        return DocumentText(text, self.syntax)


class JsonDocumentParser(DocumentParser):
    media_type = "application/json"
    syntax = "json"


class YamlDocumentParser(DocumentParser):
    media_type = "application/yaml"


class TextYamlDocumentParser(DocumentParser):
    media_type = "text/yaml"


class ImportChangeSerializer(serializers.Serializer):
    model = serializers.CharField(help_text="Model name, e.g. node, gpu, networkport, link.")
    key = serializers.CharField(help_text="The row's natural key: hostname, GPU UUID, 'gpu-001:mlx5_0/1', ...")
    action = serializers.ChoiceField(choices=["create", "update"])
    fields = serializers.DictField(
        child=serializers.ListField(min_length=2, max_length=2),
        help_text="Field name -> [old, new]; old is null on create.",
    )


class ImportResultSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    created = serializers.DictField(child=serializers.IntegerField(), help_text="Rows created, per model.")
    updated = serializers.DictField(child=serializers.IntegerField(), help_text="Rows updated, per model.")
    unchanged = serializers.DictField(
        child=serializers.IntegerField(), help_text="Records that matched the database, per model."
    )
    changes = ImportChangeSerializer(many=True)


class ImportIssueSerializer(serializers.Serializer):
    path = serializers.CharField(
        help_text="Record and field, e.g. 'nodes[3] (gpu-004).gpus[2].uuid', or the query parameter 'dry_run'."
    )
    message = serializers.CharField()


class ImportErrorsSerializer(serializers.Serializer):
    errors = ImportIssueSerializer(many=True, help_text="Every problem found; nothing was written.")


def _openapi(schema: Any, definitions: dict[str, Any]) -> Any:
    """msgspec's JSON Schema as OpenAPI 3.0 has it: references inlined, ``nullable`` instead of a null
    type, decimals as numbers (as a document writes them), enums typed."""
    if isinstance(schema, list):
        return [_openapi(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _openapi(definitions[schema["$ref"].rsplit("/", 1)[1]], definitions)
    members = schema.get("anyOf", [])
    if len(members) == 2 and {"type": "null"} in members:
        (member,) = [m for m in members if m != {"type": "null"}]
        return {**_openapi(member, definitions), "nullable": True}
    if schema.get("format") == "decimal":
        return {"type": "number"}
    converted = {key: _openapi(value, definitions) for key, value in schema.items() if key not in ("title", "$defs")}
    if "enum" in converted and "type" not in converted:
        converted["type"] = "integer" if all(isinstance(v, int) for v in converted["enum"]) else "string"
    return converted


def document_schema() -> dict[str, Any]:
    schema = msgspec.json.schema(Document)
    return _openapi(schema, schema["$defs"])


EXAMPLE = {
    "version": 1,
    "clusters": [{"name": "h100-east"}],
    "nodes": [
        {
            "hostname": "gpu-001",
            "cluster": "h100-east",
            "node_type": "hgx-h100-80g",
            "gpus": [{"index": 0, "uuid": "GPU-37aa7da5-132d-594f-ad6d-af53f6d7a7fe", "pci_bus_id": "0000:18:00.0"}],
        }
    ],
    "links": [{"a": {"node": "gpu-001", "port": "mlx5_0"}, "b": {"switch": "ib-leaf-01", "port": "p1"}}],
    "nvlinks": [{"node": "gpu-001", "mesh": True, "lanes": 18, "bandwidth_gbs": 900}],
}


class InventoryImportView(APIView):
    """Import clusters, node types, racks, fabrics, switches, nodes, GPUs, ports, links and NVLinks from
    one document, all or nothing (admin only)."""

    parser_classes = [JsonDocumentParser, YamlDocumentParser, TextYamlDocumentParser]
    write_role = Role.ADMIN

    @extend_schema(
        operation_id="inventory_import",
        summary="Import an inventory document (YAML or JSON), all or nothing",
        description=(
            "Rows are matched by natural key (names, hostnames, GPU UUIDs, ports), created or updated, and "
            "never deleted; importing the same document twice changes nothing the second time. A node's "
            "`lifecycle` applies only when the node is created. With `dry_run=true` the import runs and is "
            "rolled back, so the diff is exactly what a real import would do. Any problem refuses the whole "
            "document with 400 and a list of every problem found. The format is described in "
            "docs/inventory-import.md."
        ),
        parameters=[OpenApiParameter("dry_run", OpenApiTypes.BOOL, description="Show the diff and write nothing.")],
        request={"application/json": document_schema(), "application/yaml": document_schema()},
        responses={200: ImportResultSerializer, 400: ImportErrorsSerializer},
        examples=[OpenApiExample("One node", value=EXAMPLE, request_only=True)],
    )
    def post(self, request: Request) -> Response:
        try:
            dry_run = serializers.BooleanField().run_validation(request.query_params.get("dry_run", False))
        except serializers.ValidationError as exc:  # in the shape of the document's problems, as declared
            return Response({"errors": [{"path": "dry_run", "message": str(m)} for m in exc.detail]}, status=400)
        body = request.data  # DocumentText, or {} for an empty body (DRF skips the parser)
        try:
            raw = load_document(body.text, body.syntax) if isinstance(body, DocumentText) else body
            result = import_inventory(raw, dry_run=dry_run, actor=request.user.get_username(), user=request.user)
        except ImportFailed as exc:
            describe(
                request,
                "inventory.import",
                dry_run=dry_run,
                error_count=len(exc.issues),
                errors=[str(issue) for issue in exc.issues[:AUDITED_ISSUES]],
            )
            return Response({"errors": [msgspec.to_builtins(issue) for issue in exc.issues]}, status=400)
        describe(request, "inventory.import_dry_run" if dry_run else "inventory.import", **result.counts())
        return Response(result.as_dict())
