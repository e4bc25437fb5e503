"""The whole API under schema-driven fuzzing (tests/api_fuzzing.py, schemathesis): every operation of
the OpenAPI schema, as a viewer and as an operator, against a live server (uvicorn) with a world of
data (tests/api_world.py), then as an admin, whose creates, edits and deletes land on a world of
their own (each test's database is emptied after it). No request may get a 5xx, a body the schema
does not declare, or an error that is not JSON.

``API_FUZZ_EXAMPLES`` sets the examples per operation (default 3: under a minute per role here);
the examples are the same every run, so a finding is reproducible.
"""

import importlib
import os
import re

import pytest
from django.apps import apps as django_apps

from apps.accounts.models import ApiToken, User
from apps.accounts.roles import Role
from tests.api_fuzzing import fuzz
from tests.api_world import ENDPOINTS, build_world, path_values
from tests.dashboard.conftest import LiveServer

EXAMPLES = int(os.environ.get("API_FUZZ_EXAMPLES", "3"))


def unnamed(operation: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", operation)


add_suites_and_breakers = importlib.import_module("apps.burnin.migrations.0002_builtin_suites").add_suites_and_breakers


@pytest.fixture
def live_world(transactional_db, redis_channel_layer):
    # The rows a migration writes (the built-in burn-in suites) are gone once an earlier transactional
    # test has flushed the database: written again, as the migration writes them. (Django's serialized
    # rollback would restore them, but collides with the content types an earlier flush re-created.)
    add_suites_and_breakers(django_apps, None)
    build_world()
    server = LiveServer()
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("role", [Role.VIEWER, Role.OPERATOR, Role.ADMIN])
def test_no_request_gets_a_server_error_a_body_off_the_schema_or_an_error_that_is_not_json(live_world, role):
    # Created after the world, so that the accounts its writes name are never the fuzzer's own.
    user = User.objects.create(username=f"fuzz-{role}", role=role)
    _, token = ApiToken.issue(user=user, name="fuzz", role=role)

    report = fuzz(live_world.origin, token, examples=EXAMPLES, path_values=path_values, label=role)

    print(report.summary())
    assert not report.findings, report.details()
    # Every operation but the schema's and the docs' own (path parameters may be named differently).
    assert {unnamed(label) for label in report.operations} == {
        unnamed(f"{method} {path}") for method, path in ENDPOINTS if path.startswith("/api/v1/")
    }
    assert report.requests >= len(report.operations) * EXAMPLES
