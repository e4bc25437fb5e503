"""The OpenAPI schema: generated without a warning, valid, documenting the Bearer token scheme."""

import pytest
import yaml
from django.core.management import call_command


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("schema") / "openapi.yaml"
    # --fail-on-warn turns every drf-spectacular warning (an unresolvable type, a missing serializer)
    # into a failure; --validate checks the result against the OpenAPI specification.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text())


def test_it_documents_the_bearer_token_scheme(schema):
    assert schema["components"]["securitySchemes"]["apiToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token created by an admin: `Authorization: Bearer cpt_<id>_<secret>`.",
    }


# Agents enroll with the one-time enrollment token in the request body, before they have any credential.
TOKENLESS_OPERATIONS = {"POST /api/v1/agents/enroll"}


def test_it_accepts_a_token_on_every_operation(schema):
    without_token = {
        f"{method.upper()} {path}"
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if {"apiToken": []} not in operation.get("security", [])
    }
    assert without_token == TOKENLESS_OPERATIONS


def test_it_serves_the_schema_and_the_docs_without_credentials(client):
    schema_response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    docs_response = client.get("/api/docs/")
    docs_script = client.get("/api/docs/?script=")  # its start-up script: not inline, which the CSP refuses

    assert schema_response.status_code == 200
    assert schema_response.json()["info"]["title"] == "GPU Control Plane API"
    assert docs_response.status_code == 200
    assert b'<script src="/api/docs/?script="></script>' in docs_response.content
    assert (docs_script.status_code, docs_script["Content-Type"]) == (200, "application/javascript")
    assert b'url: "/api/schema/"' in docs_script.content
