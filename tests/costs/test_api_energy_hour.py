"""GET /api/v1/costs/energy-hour: what an IT load costs per hour in a cluster (kWh price × PUE × kW)."""

import pytest

from apps.accounts.roles import Role
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db

URL = "/api/v1/costs/energy-hour"


@pytest.fixture
def north():
    cluster = factories.cluster("north")
    factories.energy_price(cluster, valid_from=NEW_YEAR, price_per_kwh="0.12", pue="1.3")
    return cluster


def test_it_returns_the_cost_with_pue_and_its_inputs(api_client, north):
    response = api_client(Role.VIEWER).get(URL, {"cluster": north.pk, "watts": "10200", "at": "2026-02-01"})
    assert response.status_code == 200, response.content
    assert response.json() | {"source": None} == {
        "value": "1.5912",
        "unit": "USD/hour",
        "formula": "0.12 × 1.3 × 10.2",
        "inputs": {"price_per_kwh": "0.12000", "pue": "1.300", "watts": "10200", "kw": "10.2"},
        "source": None,
    }


def test_it_answers_404_when_no_energy_price_is_in_force(api_client, north):
    response = api_client(Role.VIEWER).get(URL, {"cluster": north.pk, "watts": "1000", "at": "2025-06-01"})
    assert response.status_code == 404
    assert response.json()["detail"].startswith("No energy price for north is in force on 2025-06-01.")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"watts": "1000"}, "cluster"),
        ({"cluster": "{north}"}, "watts"),
        ({"cluster": "{north}", "watts": "-1"}, "watts"),
        ({"cluster": "{north}", "watts": "lots"}, "watts"),
        ({"cluster": "{north}", "watts": "NaN"}, "watts"),
        ({"cluster": "{north}", "watts": "Infinity"}, "watts"),
        ({"cluster": "{north}", "watts": "1e30"}, "watts"),
        ({"cluster": "{north}", "watts": "100", "at": "2026-02-30"}, "at"),
    ],
)
def test_it_answers_400_naming_the_bad_parameter(api_client, north, query, field):
    query = {name: value.format(north=north.pk) for name, value in query.items()}
    response = api_client(Role.VIEWER).get(URL, query)
    assert response.status_code == 400
    assert list(response.json()) == [field]
