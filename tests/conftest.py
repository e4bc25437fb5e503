import itertools
from collections.abc import Callable, Iterator

import pytest
from asgiref.sync import SyncToAsync
from django.db import connections
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken, User
from apps.accounts.roles import Role
from apps.dashboard.consumers import _snapshot_thread
from apps.gateway.bookkeeping import _bookkeeping_thread
from apps.gateway.consumers import _inventory_thread

ROLES = ("anonymous", Role.VIEWER, Role.OPERATOR, Role.ADMIN)

pytest_plugins = ["tests.session_redis"]  # the session's Redis, and the redis_channel_layer fixture


# Production serves hashed files from a manifest built by collectstatic; tests serve the source
# files as they are, so no test depends on a collectstatic run.
SOURCE_STATIC_FILES = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}


@pytest.fixture(autouse=True, scope="session")
def _close_connections_of_long_lived_threads(django_db_setup: None) -> Iterator[None]:
    """Threads that live as long as the process keep their database connections open, as they should
    in a server: the one Channels runs consumers' database calls on, the live streams' snapshot
    thread, and the gateway's inventory and bookkeeping threads. Closed here, before the test
    databases are dropped (this is torn down first: it depends on their setup), so that the drop
    does not find them still in use."""
    yield
    for thread in (SyncToAsync.single_thread_executor, _snapshot_thread, _inventory_thread, _bookkeeping_thread):
        thread.submit(connections.close_all).result(timeout=30)


@pytest.fixture(autouse=True)
def _static_files_without_collectstatic(settings: Settings) -> None:
    settings.STORAGES = {**settings.STORAGES, "staticfiles": SOURCE_STATIC_FILES}


@pytest.fixture
def user_with_role(db: None) -> Callable[[str], User]:
    def make(role: str) -> User:
        user, _ = User.objects.get_or_create(username=f"{role}-user", defaults={"role": role})
        return user

    return make


@pytest.fixture
def api_client(user_with_role: Callable[[str], User]) -> Callable[[str], APIClient]:
    """An API client acting with a role, through a real API token (``anonymous``: no credentials)."""

    issued = itertools.count(1)

    def make(role: str) -> APIClient:
        client = APIClient()
        if role != "anonymous":
            _, secret = ApiToken.issue(user=user_with_role(role), name=f"test-{role}-{next(issued)}", role=role)
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return client

    return make


@pytest.fixture
def admin_api(api_client: Callable[[str], APIClient]) -> APIClient:
    return api_client(Role.ADMIN)
