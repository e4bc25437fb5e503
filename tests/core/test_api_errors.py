"""An API client gets JSON, whatever goes wrong: the API root at /api/v1/, a path with a stray trailing
slash redirected to its endpoint, a path that is no endpoint a JSON 404, an oversize body a JSON 413,
and the 500 a JSON body too. Browsers keep Django's HTML pages."""

import pytest
from django.test import override_settings

from apps.accounts.roles import Role
from apps.core.api.root import ApiRootView
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(api_client):
    client = api_client(Role.VIEWER)
    client.raise_request_exception = False
    return client


def test_the_api_root_lists_the_collections(viewer):
    response = viewer.get("/api/v1/")

    assert response.status_code == 200
    body = response.json()
    assert body["schema"] == "http://testserver/api/schema/"
    assert body["docs"] == "http://testserver/api/docs/"
    assert body["endpoints"]["nodes"] == "http://testserver/api/v1/nodes"
    assert body["endpoints"]["failures/reliability"] == "http://testserver/api/v1/failures/reliability"
    assert not [name for name in body["endpoints"] if "{" in name]  # collections only, no item routes


def test_the_api_root_needs_credentials(api_client):
    response = api_client("anonymous").get("/api/v1/")

    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/api/v1/nodes/?lifecycle=new", "/api/v1/nodes?lifecycle=new"),
        ("/api/v1/nodes/7/", "/api/v1/nodes/7"),
        ("/api/v1", "/api/v1/"),
        ("/api/schema", "/api/schema/"),
    ],
)
def test_a_path_with_or_without_its_trailing_slash_redirects_to_the_endpoint(viewer, path, location):
    response = viewer.get(path)

    assert response.status_code == 308  # permanent, and a POST stays a POST with its body
    assert response["Location"] == location
    assert response.json() == {"detail": f"This endpoint is {location.split('?')[0]}."}


def test_a_write_with_a_trailing_slash_is_redirected_not_dropped(api_client):
    node = factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-007")

    response = api_client(Role.OPERATOR).post(f"/api/v1/nodes/{node.pk}/quarantine/", {"reason": "XID 79"})

    assert response.status_code == 308
    assert response["Location"] == f"/api/v1/nodes/{node.pk}/quarantine"
    node.refresh_from_db()
    assert node.lifecycle != "quarantined"  # the redirect itself changes nothing


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/nodes/1/nope", "/api/v2/nodes", "/api/"])
def test_a_path_that_is_no_endpoint_is_a_json_404(viewer, path):
    response = viewer.get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["detail"].startswith(f"No API endpoint at {path};")


def test_a_page_that_does_not_exist_is_still_html_for_a_browser(client):
    response = client.get("/no-such-page/", HTTP_ACCEPT="text/html")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_a_client_that_asks_for_json_gets_json_outside_the_api_too(client):
    response = client.get("/no-such-page/", HTTP_ACCEPT="application/json")

    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1024)
def test_an_oversize_body_is_a_json_413(api_client):
    client = api_client(Role.ADMIN)
    client.raise_request_exception = False

    response = client.generic("POST", "/api/v1/clusters", b'{"name": "' + b"x" * 2048 + b'"}', "application/json")

    assert response.status_code == 413
    assert response.json() == {"detail": "The request body is larger than 1024 bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)."}


def test_a_server_error_is_json_for_an_api_client(viewer, monkeypatch):
    def fail(*args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ApiRootView, "get", fail)

    response = viewer.get("/api/v1/")

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "The server failed to answer this request; the error is in its log."}
