"""The OpenAPI schema: generated without a warning, valid, documenting the Bearer token scheme."""

import pytest
import yaml
from django.core.management import call_command

from apps.accounts.roles import Role
from tests import factories


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


# Fields a response can carry as null (an optional relation, a counter of refused connections with no
# node, a link whose end was removed), which generated clients read as non-null unless declared so.
NULLABLE = [
    ("NetworkPort", "connected_switch"),
    ("NetworkPort", "connected_switch_port"),
    ("Node", "rack_name"),
    ("GatewayCounter", "hostname"),
    ("EnrollmentToken", "used_by_hostname"),
    ("EnrollmentToken", "created_by"),
    ("Failure", "gpu_uuid"),
    ("NodeCredential", "enrollment_token"),
    ("Link", "a"),
    ("Link", "b"),
    ("Run", "created_by"),
]


@pytest.mark.parametrize(("component", "name"), NULLABLE, ids=[f"{c}.{n}" for c, n in NULLABLE])
def test_it_declares_nullable_what_can_be_null(schema, component, name):
    assert schema["components"]["schemas"][component]["properties"][name].get("nullable") is True


def test_it_allows_a_blank_outcome_for_a_command_not_over(schema):
    outcome = schema["components"]["schemas"]["Command"]["properties"]["outcome"]
    assert {"$ref": "#/components/schemas/BlankEnum"} in outcome["oneOf"]


def response_schema(schema: dict, path: str) -> dict:
    return schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]


@pytest.mark.parametrize(
    ("path", "page"),
    [
        ("/api/v1/nodes/{id}/history", "PaginatedNodeTransitionList"),
        ("/api/v1/nodes/{id}/siblings", "PaginatedNodeList"),
        ("/api/v1/switches/{id}/nodes", "PaginatedNodeList"),
    ],
)
def test_a_list_like_action_is_declared_as_pages_without_the_collections_filters(schema, path, page):
    assert response_schema(schema, path) == {"$ref": f"#/components/schemas/{page}"}
    parameters = {p["name"] for p in schema["paths"][path]["get"]["parameters"]}
    assert parameters == {"id", "limit", "offset"}


def test_a_ports_trace_is_declared_as_one_array(schema):
    assert response_schema(schema, "/api/v1/network-ports/{id}/trace") == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/TraceHop"},
    }
    assert [p["name"] for p in schema["paths"]["/api/v1/network-ports/{id}/trace"]["get"]["parameters"]] == ["id"]


@pytest.mark.django_db
def test_list_like_actions_answer_in_pages_and_a_trace_as_an_array(api_client):
    cluster = factories.cluster()
    node, sibling = (factories.node(cluster, factories.node_type(nics=1)) for _ in range(2))
    leaf = factories.switch(factories.fabric(cluster))
    for n in (node, sibling):
        factories.cable_node_to_leaf(n, leaf)
    viewer = api_client(Role.VIEWER)

    for path in (f"/api/v1/nodes/{node.pk}/siblings", f"/api/v1/switches/{leaf.pk}/nodes?limit=1"):
        body = viewer.get(path).json()
        assert set(body) == {"count", "next", "previous", "results"}, path
    assert viewer.get(f"/api/v1/switches/{leaf.pk}/nodes?limit=1").json()["count"] == 2
    assert [n["hostname"] for n in viewer.get(f"/api/v1/nodes/{node.pk}/siblings").json()["results"]] == [
        sibling.hostname
    ]
    trace = viewer.get(f"/api/v1/network-ports/{node.ports.get().pk}/trace").json()
    assert isinstance(trace, list)
    assert trace


@pytest.mark.django_db
def test_an_unreadable_dry_run_is_answered_in_the_imports_declared_error_shape(schema, api_client):
    response = api_client(Role.ADMIN).post("/api/v1/inventory/import?dry_run=maybe", {"version": 1}, format="json")

    assert response.status_code == 400
    assert response.json() == {"errors": [{"path": "dry_run", "message": "Must be a valid boolean."}]}
    declared = schema["paths"]["/api/v1/inventory/import"]["post"]["responses"]["400"]
    assert declared["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ImportErrors"}
