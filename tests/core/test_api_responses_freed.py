"""An API response is freed when its request is done, not left in a reference cycle for the garbage
collector to free in the middle of a later request (apps/core/api/middleware.py)."""

import gc
from collections.abc import Iterator

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.test import RequestFactory
from rest_framework.response import Response

from apps.accounts.models import ApiToken
from apps.accounts.roles import Role
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def unreachable() -> Iterator[list[object]]:
    """What the collector finds unreachable from here on (kept for inspection, not freed)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def served(path: str, secret: str) -> int:
    """The status of ``path`` served by Django's own handler and middleware, as a server calls them
    (the test client keeps every response it returns in a cycle of its own)."""
    request = RequestFactory().get(path, HTTP_AUTHORIZATION=f"Bearer {secret}", secure=True)
    return WSGIHandler().get_response(request).status_code


@pytest.mark.parametrize("path", ["/api/v1/nodes", "/api/v1/nodes/{node}/telemetry?window=15m&metric=util_gpu"])
def test_an_api_response_is_not_left_for_the_collector(user_with_role, unreachable, path):
    node = factories.node(factories.cluster(), factories.node_type())
    _, secret = ApiToken.issue(user=user_with_role(Role.VIEWER), name="freed", role=Role.VIEWER)

    assert served(path.format(node=node.pk), secret) == 200

    gc.collect()
    # type(), not isinstance(): the request's lazy attributes (its CSP nonce) must not be evaluated
    left = [found for found in unreachable if Response in type(found).__mro__]
    assert left == []
