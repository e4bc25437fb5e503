import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator

import pytest
from asgiref.sync import SyncToAsync
from django.db import connections
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken, User
from apps.accounts.roles import Role
from apps.core.process import process

ROLES = ("anonymous", Role.VIEWER, Role.OPERATOR, Role.ADMIN)

pytest_plugins = ["tests.session_redis"]  # the session's Redis, and the redis_channel_layer fixture


# Production serves hashed files from a manifest built by collectstatic; tests serve the source
# files as they are, so no test depends on a collectstatic run.
SOURCE_STATIC_FILES = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}


def shut_down_the_process() -> None:
    """``process.shutdown()`` on a thread of its own, whatever loop runs (or not) on the caller's."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(process.shutdown())
        except BaseException as error:  # re-raised on the caller's thread
            failed.append(error)

    thread = threading.Thread(target=run, name="shut-down-the-process")
    thread.start()
    thread.join(timeout=30)
    if failed:
        raise failed[0]


@pytest.fixture(autouse=True)
def _a_fresh_process_for_every_test() -> Iterator[None]:
    """What the process holds while it runs (apps/core/process.py: worker threads and their database
    connections, the ingestor's and the live streams' memory of what they stored and sent) is shut
    down after every test, as a server's lifespan shuts it down, so that no test inherits another's:
    node ids repeat from one test to the next. The next test that uses a part starts it afresh."""
    yield
    shut_down_the_process()


@pytest.fixture(autouse=True, scope="session")
def _close_connections_of_the_consumers_thread(django_db_setup: None) -> Iterator[None]:
    """The thread Channels runs consumers' database calls on lives as long as the process and keeps its
    connection open, as it should in a server. Closed here, before the test databases are dropped
    (this is torn down first: it depends on their setup), so that the drop does not find it in use."""
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


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
