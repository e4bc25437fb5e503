"""POST /api/v1/inventory/import: admins import YAML or JSON; errors are 400 with paths; every call is audited."""

import pytest
import yaml

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.inventory.models import Gpu, Node
from tests.inventory.import_documents import small_document

pytestmark = pytest.mark.django_db

URL = "/api/v1/inventory/import"


@pytest.mark.parametrize("content_type", ["application/yaml", "text/yaml"])
def test_an_admin_imports_a_yaml_document(admin_api, content_type):
    response = admin_api.post(URL, yaml.safe_dump(small_document()), content_type=content_type)

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["dry_run"] is False
    assert (body["created"]["node"], body["created"]["gpu"]) == (2, 4)
    assert ("node", "gpu-a", "create") in [(c["model"], c["key"], c["action"]) for c in body["changes"]]
    assert Gpu.objects.count() == 4
    entry = AuditLogEntry.objects.get(action="inventory.import")
    assert (entry.actor, entry.status_code) == ("admin-user", 200)
    assert entry.detail["created"]["gpu"] == 4
    assert Node.objects.get(hostname="gpu-a").transitions.get().actor == "admin-user"


def test_an_admin_imports_a_json_document_and_the_second_import_changes_nothing(admin_api):
    assert admin_api.post(URL, small_document(), format="json").status_code == 200

    response = admin_api.post(URL, small_document(), format="json")

    assert response.status_code == 200
    assert (response.json()["created"], response.json()["updated"], response.json()["changes"]) == ({}, {}, [])


@pytest.mark.parametrize(("role", "status"), [("anonymous", 401), (Role.VIEWER, 403), (Role.OPERATOR, 403)])
def test_only_admins_may_import(api_client, role, status):
    response = api_client(role).post(URL, small_document(), format="json")

    assert response.status_code == status
    assert not Node.objects.exists()


def test_a_dry_run_returns_the_diff_and_writes_nothing(admin_api):
    response = admin_api.post(f"{URL}?dry_run=true", small_document(), format="json")

    assert response.status_code == 200
    assert response.json()["dry_run"] is True
    assert response.json()["created"]["node"] == 2
    assert not Node.objects.exists()
    assert AuditLogEntry.objects.get().action == "inventory.import_dry_run"


def test_a_bad_document_is_a_400_listing_every_problem_and_writes_nothing(admin_api):
    document = small_document()
    document["nodes"][0]["gpus"][1]["state"] = "broken"
    document["links"][3]["b"]["switch"] = "leaf-9"

    response = admin_api.post(URL, document, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "errors": [
            {
                "path": "nodes[0] (gpu-a).gpus[1].state",
                "message": "'broken' is not one of: healthy, degraded, failed, missing",
            }
        ]
    }
    document["nodes"][0]["gpus"][1]["state"] = "failed"
    response = admin_api.post(URL, document, format="json")
    assert response.json()["errors"] == [
        {
            "path": "links[3] (gpu-b:mlx5_1 ↔ leaf-9:p4).b.switch",
            "message": "no switch 'leaf-9' in this file or the database (did you mean 'leaf-01'?)",
        }
    ]
    assert not Node.objects.exists()
    refused = AuditLogEntry.objects.filter(action="inventory.import").order_by("pk").last()
    assert (refused.status_code, refused.detail["error_count"]) == (400, 1)


def test_malformed_bodies_are_a_400_with_line_and_column(admin_api):
    json_response = admin_api.post(URL, b'{"version": 1,\n  "nodes": [,]}', content_type="application/json")
    yaml_response = admin_api.post(URL, b"version: 1\nnodes: [\n", content_type="application/yaml")

    assert json_response.status_code == yaml_response.status_code == 400
    assert json_response.json()["errors"] == [
        {"path": "document", "message": "JSON syntax error at line 2, column 13: Expecting value"}
    ]
    assert yaml_response.json()["errors"][0]["message"].startswith("YAML error at line 3, column 1: ")


def test_an_unknown_content_type_is_refused(admin_api):
    response = admin_api.post(URL, "version=1", content_type="application/x-www-form-urlencoded")

    assert response.status_code == 415


def test_an_empty_body_asks_for_the_version(admin_api):
    response = admin_api.post(URL, b"", content_type="application/json")

    assert response.status_code == 400
    assert response.json()["errors"] == [{"path": "version", "message": "required: the format version (version: 1)"}]


def test_a_document_over_the_upload_limit_is_refused(admin_api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024

    response = admin_api.post(URL, small_document(), format="json")

    assert response.status_code == 413
    assert "larger than 1024 bytes" in response.json()["detail"]
    assert not Node.objects.exists()
