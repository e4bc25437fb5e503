import itertools
from collections.abc import Callable

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken, User
from apps.accounts.roles import Role

ROLES = ("anonymous", Role.VIEWER, Role.OPERATOR, Role.ADMIN)


# Production serves hashed files from a manifest built by collectstatic; tests serve the source
# files as they are, so no test depends on a collectstatic run.
SOURCE_STATIC_FILES = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}


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
