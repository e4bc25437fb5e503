"""Every endpoint × every role: anonymous gets 401, a role below the endpoint's gets 403, any role at or
above it gets past the permission layer (a write with an empty body may then be a 400, 404 or 409,
never a 500).

The endpoints are enumerated from the URL conf, the way the schema generator finds them, so a new
endpoint joins the matrix by itself, and ``test_it_declares_the_roles_of_every_endpoint`` fails until
someone decides, in ``REQUIRED_ROLE`` below, who may call it.
"""

from collections.abc import Callable, Iterator

import pytest
from django.conf import settings
from django.middleware.csrf import get_token
from django.test import RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import EndpointEnumerator
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken, User
from apps.accounts.roles import Role, role_rank
from apps.inventory.models import Cluster
from tests.api_world import ENDPOINTS, build_world, path_values
from tests.dashboard.test_page_access import PAGE_ROUTES
from tests.shared_data import rolled_back_afterwards

ANONYMOUS = "anonymous"
PUBLIC = "public"  # needs no credentials at all
VIEWER, OPERATOR, ADMIN = Role.VIEWER, Role.OPERATOR, Role.ADMIN
ROLES = (ANONYMOUS, VIEWER, OPERATOR, ADMIN)


def collection_and_item(base: str, read: str = VIEWER, write: str = ADMIN) -> dict[str, dict[str, str]]:
    """The usual resource: anyone with ``read`` lists and reads it, ``write`` creates, edits and deletes."""
    return {
        base: {"GET": read, "POST": write},
        f"{base}/{{id}}": {"GET": read, "PUT": write, "PATCH": write, "DELETE": write},
    }


def read_only(base: str, read: str = VIEWER) -> dict[str, dict[str, str]]:
    return {base: {"GET": read}, f"{base}/{{id}}": {"GET": read}}


# The lowest role each endpoint and method needs. Inventory: viewers read, admins write. Lifecycle
# actions: operators, except retiring a node, which is final (admin). Users and tokens: admin. The
# audit log: operators and up.
REQUIRED_ROLE: dict[str, dict[str, str]] = {
    "/api/schema/": {"GET": PUBLIC},
    "/api/docs/": {"GET": PUBLIC},
    "/api/v1/": {"GET": VIEWER},  # the API root
    "/api/v1/me": {"GET": VIEWER},
    # Accounts
    "/api/v1/users": {"GET": ADMIN, "POST": ADMIN},
    "/api/v1/users/{id}": {"GET": ADMIN, "PATCH": ADMIN},  # deactivated, never deleted
    "/api/v1/tokens": {"GET": ADMIN, "POST": ADMIN},
    "/api/v1/tokens/{id}": {"GET": ADMIN},
    "/api/v1/tokens/{id}/revoke": {"POST": ADMIN},
    **read_only("/api/v1/audit-log", OPERATOR),
    # Inventory
    "/api/v1/inventory/import": {"POST": ADMIN},
    **collection_and_item("/api/v1/clusters"),
    **collection_and_item("/api/v1/node-types"),
    **collection_and_item("/api/v1/port-templates"),
    **collection_and_item("/api/v1/racks"),
    **collection_and_item("/api/v1/nodes"),
    "/api/v1/nodes/{id}/history": {"GET": VIEWER},
    "/api/v1/nodes/{id}/nvlink-matrix": {"GET": VIEWER},
    "/api/v1/nodes/{id}/siblings": {"GET": VIEWER},
    "/api/v1/nodes/{id}/start-burn-in": {"POST": OPERATOR},
    "/api/v1/nodes/{id}/quarantine": {"POST": OPERATOR},
    "/api/v1/nodes/{id}/drain": {"POST": OPERATOR},
    "/api/v1/nodes/{id}/return-to-service": {"POST": OPERATOR},
    "/api/v1/nodes/{id}/retire": {"POST": ADMIN},
    **read_only("/api/v1/node-transitions"),
    **collection_and_item("/api/v1/gpus"),
    **collection_and_item("/api/v1/network-ports"),
    "/api/v1/network-ports/{id}/trace": {"GET": VIEWER},
    **collection_and_item("/api/v1/fabrics"),
    "/api/v1/fabric/theoretical-busbw": {"GET": VIEWER},
    **collection_and_item("/api/v1/switches"),
    "/api/v1/switches/{id}/nodes": {"GET": VIEWER},
    **collection_and_item("/api/v1/switch-ports"),
    **collection_and_item("/api/v1/links"),
    **collection_and_item("/api/v1/nvlinks"),
    # Costs
    **collection_and_item("/api/v1/gpu-prices"),
    **collection_and_item("/api/v1/energy-prices"),
    "/api/v1/costs/gpu-hour": {"GET": VIEWER},
    "/api/v1/costs/energy-hour": {"GET": VIEWER},
    "/api/v1/costs/clusters/{id}/rate": {"GET": VIEWER},
    # Failures: viewers read, operators acknowledge, resolve and move the node
    **read_only("/api/v1/failures"),
    "/api/v1/failures/{id}/acknowledge": {"POST": OPERATOR},
    "/api/v1/failures/{id}/resolve": {"POST": OPERATOR},
    "/api/v1/failures/{id}/node-action": {"POST": OPERATOR},  # retiring for a failure: admin (tests/failures)
    "/api/v1/failures/reliability": {"GET": VIEWER},
    **read_only("/api/v1/stragglers"),
    "/api/v1/xid-catalog": {"GET": VIEWER},
    "/api/v1/xid-catalog/{code}": {"GET": VIEWER},
    # Telemetry: charts and the Prometheus export (scrapers use a viewer token)
    "/api/v1/nodes/{node}/telemetry": {"GET": VIEWER},
    "/api/v1/telemetry/fleet": {"GET": VIEWER},
    "/metrics": {"GET": VIEWER},
    # Gateway: enrollment is authenticated by the enrollment token in its body, not by a role
    "/api/v1/agents/enroll": {"POST": PUBLIC},
    "/api/v1/enrollment-tokens": {"GET": ADMIN, "POST": ADMIN},
    "/api/v1/enrollment-tokens/{id}": {"GET": ADMIN},
    "/api/v1/enrollment-tokens/{id}/revoke": {"POST": ADMIN},
    **read_only("/api/v1/node-credentials", ADMIN),
    "/api/v1/node-credentials/{id}/revoke": {"POST": ADMIN},
    **read_only("/api/v1/agents"),
    "/api/v1/agents/{id}/reset-seqs": {"POST": ADMIN},
    **read_only("/api/v1/discovery-changes"),
    **read_only("/api/v1/gateway-errors"),
    # Runs and commands: viewers read, operators start and cancel
    "/api/v1/runs": {"GET": VIEWER, "POST": OPERATOR},
    "/api/v1/runs/{id}": {"GET": VIEWER},
    "/api/v1/runs/{id}/cancel": {"POST": OPERATOR},
    "/api/v1/runs/{id}/logs": {"GET": VIEWER},
    **read_only("/api/v1/commands"),
    "/api/v1/commands/{id}/cancel": {"POST": OPERATOR},
    # Burn-ins: viewers read, operators start them and close a quarantine breaker; suites, thresholds
    # and a breaker's share and window: admins
    "/api/v1/burn-ins": {"GET": VIEWER, "POST": OPERATOR},
    "/api/v1/burn-ins/{id}": {"GET": VIEWER},
    **read_only("/api/v1/burn-in-nodes"),
    **read_only("/api/v1/burn-in-checks"),
    **collection_and_item("/api/v1/burn-in-suites"),
    "/api/v1/burn-in-thresholds": {"GET": VIEWER, "POST": ADMIN},
    "/api/v1/burn-in-thresholds/{id}": {"GET": VIEWER},
    "/api/v1/quarantine-breakers": {"GET": VIEWER},
    "/api/v1/quarantine-breakers/{id}": {"GET": VIEWER, "PATCH": ADMIN},
    "/api/v1/quarantine-breakers/{id}/close": {"POST": OPERATOR},
}


def url_patterns(patterns: list, prefix: str = "") -> Iterator[tuple[str, Callable]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from url_patterns(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.callback


DECLARED = {(method, path) for path, methods in REQUIRED_ROLE.items() for method in methods}


def test_it_declares_the_roles_of_every_endpoint():
    undeclared = sorted(set(ENDPOINTS) - DECLARED, key=lambda e: (e[1], e[0]))
    assert not undeclared, "Decide who may call these endpoints (REQUIRED_ROLE): " + ", ".join(
        f"{method} {path}" for method, path in undeclared
    )


def test_it_declares_no_endpoint_that_is_not_served():
    stale = sorted(DECLARED - set(ENDPOINTS), key=lambda e: (e[1], e[0]))
    assert not stale, "REQUIRED_ROLE names endpoints that do not exist: " + ", ".join(
        f"{method} {path}" for method, path in stale
    )


# The last route under /api/ (apps/core/api/errors.py): it reads nothing and changes nothing, only
# answers "no such endpoint" in JSON or redirects to the path with(out) its trailing slash.
NOT_FOUND_ROUTE = "^api/"


def test_it_serves_no_view_that_the_matrix_cannot_see():
    """A plain Django view, or a DRF view hidden from the enumerator (``schema = None``), would
    bypass the role checks unnoticed; only the admin site, with its own staff checks, may, the
    dashboard's pages, which tests/dashboard/test_page_access.py checks the same way, and the API's
    not-found route."""
    enumerated = {callback for _, _, _, callback in EndpointEnumerator().get_api_endpoints()}
    hidden = [
        route
        for route, callback in url_patterns(get_resolver().url_patterns)
        if not route.startswith("admin/")
        and callback not in enumerated
        and route not in PAGE_ROUTES
        and route != NOT_FOUND_ROUTE
    ]
    assert not hidden, f"Views outside the role matrix: {hidden}"


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """One row of every kind the API serves, so each ``{id}`` names a real object. Built once: each
    test's writes are rolled back with its own transaction."""
    with rolled_back_afterwards(django_db_blocker):
        build_world()
        yield


def url_for(path: str) -> str:
    try:
        return path.format(**path_values(path))
    except LookupError as exc:
        pytest.fail(str(exc))


def cases() -> Iterator:
    for method, path in sorted(ENDPOINTS, key=lambda e: (e[1], e[0])):
        for role in ROLES:
            yield pytest.param(method, path, role, "token", id=f"{method} {path} as {role}")
        for role in ROLES[1:]:
            yield pytest.param(method, path, role, "session", id=f"{method} {path} as {role} (session)")


def client_for(role: str, auth: str, api_client: Callable[[str], APIClient], user_with_role) -> APIClient:
    if auth == "token" or role == ANONYMOUS:
        return api_client(role)
    client = APIClient()  # CSRF is not enforced here; test_it_refuses_a_session_write_without_csrf covers it
    client.force_login(user_with_role(role))
    return client


@pytest.mark.parametrize(("method", "path", "role", "auth"), list(cases()))
def test_it_applies_the_required_role(method, path, role, auth, world, api_client, user_with_role):
    required = REQUIRED_ROLE.get(path, {}).get(method)
    if required is None:
        pytest.fail(f"{method} {path} has no required role in REQUIRED_ROLE.")
    client = client_for(role, auth, api_client, user_with_role)

    response = client.generic(method, url_for(path), "{}", content_type="application/json")

    if required == PUBLIC or role_rank(role if role != ANONYMOUS else None) >= role_rank(required):
        assert response.status_code not in (401, 403), response.content
        assert response.status_code < 500, response.content
    elif role == ANONYMOUS:
        assert response.status_code == 401, response.content
        assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    else:
        assert response.status_code == 403, response.content
        assert response.json()["detail"] == f"This action needs the {required} role; you have {role}."


# Session (browser) authentication -------------------------------------------------------------


def test_it_refuses_a_session_write_without_csrf_token(user_with_role):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user_with_role(ADMIN))

    response = client.post("/api/v1/clusters", {"name": "forged"})

    assert response.status_code == 403
    assert response.json()["detail"].startswith("CSRF Failed")
    assert not Cluster.objects.filter(name="forged").exists()


def test_it_accepts_a_session_write_with_csrf_token(user_with_role):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user_with_role(ADMIN))
    csrf = get_token(RequestFactory().get("/"))
    client.cookies[settings.CSRF_COOKIE_NAME] = csrf

    response = client.post("/api/v1/clusters", {"name": "from-the-browser"}, HTTP_X_CSRFTOKEN=csrf)

    assert response.status_code == 201, response.content


def test_it_needs_no_csrf_token_for_a_bearer_token(user_with_role):
    _, secret = ApiToken.issue(user=user_with_role(ADMIN), name="script", role=ADMIN)
    client = APIClient(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Bearer {secret}")

    response = client.post("/api/v1/clusters", {"name": "from-a-script"})

    assert response.status_code == 201, response.content


def test_it_treats_a_deactivated_session_user_as_anonymous(user_with_role):
    user = user_with_role(ADMIN)
    client = APIClient()
    client.force_login(user)
    User.objects.filter(pk=user.pk).update(is_active=False)

    assert client.get("/api/v1/me").status_code == 401


# A token acts with the lower of its scope and its owner's current role ------------------------


def test_it_refuses_writes_through_a_viewer_token_of_an_admin(user_with_role):
    _, secret = ApiToken.issue(user=user_with_role(ADMIN), name="read-only dashboards", role=VIEWER)
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")

    assert client.get("/api/v1/clusters").status_code == 200
    response = client.post("/api/v1/clusters", {"name": "nope"})

    assert response.status_code == 403
    assert response.json()["detail"] == "This action needs the admin role; you have viewer."
    assert client.get("/api/v1/me").json()["effective_role"] == VIEWER


def test_it_demotes_the_tokens_of_a_demoted_user(user_with_role):
    admin = user_with_role(ADMIN)
    _, secret = ApiToken.issue(user=admin, name="inventory sync", role=ADMIN)
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.post("/api/v1/clusters", {"name": "before-demotion"}).status_code == 201

    admin.role = OPERATOR
    admin.save(update_fields=["role"])

    response = client.post("/api/v1/clusters", {"name": "after-demotion"})
    assert response.status_code == 403
    assert response.json()["detail"] == "This action needs the admin role; you have operator."
    assert client.get("/api/v1/me").json()["effective_role"] == OPERATOR


def test_it_lets_a_superuser_act_as_admin_whatever_the_role_field_says(db):
    root = User.objects.create(username="root", role=VIEWER, is_superuser=True)
    _, secret = ApiToken.issue(user=root, name="break-glass", role=ADMIN)
    client = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}")

    assert client.post("/api/v1/clusters", {"name": "by-root"}).status_code == 201
