"""GET /api/v1/costs/gpu-hour: what a GPU-hour of a node type costs on a date, with its inputs."""

import pytest
from django.utils import timezone

from apps.accounts.roles import Role
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db

URL = "/api/v1/costs/gpu-hour"


@pytest.fixture
def viewer(api_client):
    return api_client(Role.VIEWER)


def test_it_returns_the_figure_with_its_formula_and_inputs(viewer, owned_h100_price, h100):
    response = viewer.get(URL, {"node_type": h100.pk, "at": "2026-03-01"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["value"], body["unit"]) == ("1.1764", "USD/GPU-hour")
    assert body["formula"] == "(250000 / 4 + 20000) / 8766 / 8"
    assert body["inputs"]["gpus_per_node"] == 8
    assert body["source"].startswith(f"GPU price #{owned_h100_price.pk} for hgx-h100")


def test_it_defaults_to_the_price_in_force_today(viewer, h100):
    today = timezone.localdate()
    factories.gpu_price(h100, valid_from=today.replace(year=today.year - 1), valid_to=today)
    current = factories.gpu_price(h100, valid_from=today, hourly_price_per_gpu="1.99")
    response = viewer.get(URL, {"node_type": h100.pk})
    assert response.status_code == 200, response.content
    assert response.json()["source"].startswith(f"GPU price #{current.pk} ")


def test_it_answers_404_saying_which_periods_exist(viewer, owned_h100_price, h100):
    response = viewer.get(URL, {"node_type": h100.pk, "at": "2025-12-31"})
    assert response.status_code == 404
    assert response.json()["detail"] == (
        "No GPU price for hgx-h100 is in force on 2025-12-31. Its prices are: valid from 2026-01-01, open-ended."
    )


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({}, "node_type"),
        ({"node_type": "abc"}, "node_type"),
        ({"node_type": "999999"}, "node_type"),
        ({"node_type": "{h100}", "at": "2026-13-01"}, "at"),
        ({"node_type": "{h100}", "at": "today"}, "at"),
    ],
)
def test_it_answers_400_naming_the_bad_parameter(viewer, h100, query, field):
    query = {name: value.format(h100=h100.pk) for name, value in query.items()}
    response = viewer.get(URL, query)
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_it_refuses_anonymous_callers(api_client, h100):
    assert api_client("anonymous").get(URL, {"node_type": h100.pk, "at": NEW_YEAR}).status_code == 401
