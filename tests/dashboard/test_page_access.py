"""Who may open the dashboard's pages: every page needs a signed-in user with a role (any role: pages
only read; their buttons call the REST API, which checks the role of each action again). Signing in
and out are the only pages open to everyone. tests/test_api_permissions.py fails on any route that
is neither in its API matrix nor here."""

import pytest
from django.test import Client

from apps.accounts.models import User
from tests import factories
from tests.dashboard.test_pages_runs import make_run

# Route (as the URL resolver spells it) -> a path to request it with (``{node}``: an existing node, ``{run}``: a run).
PAGES = {
    "": "/",
    "nodes/": "/nodes/",
    "nodes/<int:pk>/": "/nodes/{node}/",
    "failures/": "/failures/",
    "topology/": "/topology/",
    "racks/": "/racks/",
    "reliability/": "/reliability/",
    "runs/": "/runs/",
    "runs/<int:pk>/": "/runs/{run}/",
}
PUBLIC = {"login/", "logout/"}
PAGE_ROUTES = set(PAGES) | PUBLIC

pytestmark = pytest.mark.django_db


@pytest.fixture
def node_id() -> int:
    return factories.node(factories.cluster(), factories.node_type(nics=1)).pk


@pytest.fixture
def run_id() -> int:
    return make_run(1).pk


def signed_in(**fields: object) -> Client:
    client = Client()
    client.force_login(User.objects.create_user(f"user-{User.objects.count()}", **fields))
    return client


@pytest.mark.parametrize("path", PAGES.values())
def test_a_visitor_who_is_not_signed_in_is_sent_to_sign_in(path, node_id, run_id):
    response = Client().get(path.format(node=node_id, run=run_id))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize("path", PAGES.values())
def test_a_user_without_a_role_is_refused(path, node_id, run_id):
    assert signed_in(role="").get(path.format(node=node_id, run=run_id)).status_code == 403


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
@pytest.mark.parametrize("path", PAGES.values())
def test_every_role_may_read_every_page(path, role, node_id, run_id):
    assert signed_in(role=role).get(path.format(node=node_id, run=run_id)).status_code == 200


def test_signing_in_is_open_to_everyone_and_a_signed_in_user_goes_straight_to_the_fleet():
    assert Client().get("/login/").status_code == 200
    assert signed_in(role="viewer").get("/login/")["Location"] == "/"


def test_signing_out_takes_a_post_and_ends_the_session():
    client = signed_in(role="viewer")
    assert client.get("/logout/").status_code == 405  # a link or an image tag cannot sign anyone out
    assert client.post("/logout/").status_code == 302
    assert client.get("/")["Location"].startswith("/login/")
