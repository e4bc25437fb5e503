"""/api/v1/energy-prices: energy price and PUE per cluster, each row with the cost of a kW-hour."""

import pytest

from apps.accounts.roles import Role
from apps.costs.models import EnergyPrice
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db

URL = "/api/v1/energy-prices"


@pytest.fixture
def north():
    return factories.cluster("north")


def test_it_creates_a_price_and_shows_what_a_kw_hour_costs_with_overhead(admin_api, north):
    response = admin_api.post(
        URL, {"cluster": north.pk, "price_per_kwh": "0.12", "pue": "1.3", "currency": "EUR", "valid_from": "2026-01-01"}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["cluster_name"], body["price_per_kwh"], body["pue"]) == ("north", "0.12000", "1.300")
    assert body["cost_per_kw_hour"] == {
        "value": "0.1560",
        "unit": "EUR/hour",
        "formula": "0.12 × 1.3 × 1",
        "inputs": {"price_per_kwh": "0.12000", "pue": "1.300", "watts": 1000, "kw": "1"},
        "source": f"Energy price #{body['id']} for north (valid from 2026-01-01, open-ended)",
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pue": "0.9"}, {"pue": ["A PUE cannot be below 1.0 (facility power ÷ IT power)."]}),
        ({"pue": "13"}, {"pue": ["Ensure that there are no more than 1 digits before the decimal point."]}),
        ({"price_per_kwh": "0"}, {"price_per_kwh": ["Must be greater than zero."]}),
        ({"price_per_kwh": "NaN"}, {"price_per_kwh": ["A valid number is required."]}),
    ],
)
def test_it_refuses_bad_values_naming_the_field(admin_api, north, changes, message):
    body = {"cluster": north.pk, "price_per_kwh": "0.12", "pue": "1.3", "valid_from": "2026-01-01", **changes}
    response = admin_api.post(URL, body)
    assert response.status_code == 400
    assert response.json() == message
    assert not EnergyPrice.objects.exists()


def test_it_refuses_an_overlapping_price(admin_api, north):
    factories.energy_price(north, valid_from=NEW_YEAR)
    response = admin_api.post(
        URL, {"cluster": north.pk, "price_per_kwh": "0.2", "pue": "1.2", "valid_from": "2026-02-01"}
    )
    assert response.status_code == 400
    assert response.json()["valid_from"][0].startswith("Overlaps Energy price #")


def test_it_filters_by_cluster_and_date(api_client, north):
    south = factories.cluster("south")
    ours = factories.energy_price(north, valid_from=NEW_YEAR)
    theirs = factories.energy_price(south, valid_from=NEW_YEAR)
    client = api_client(Role.VIEWER)

    def ids(query: str) -> list[int]:
        response = client.get(f"{URL}?{query}")
        assert response.status_code == 200, response.content
        return [row["id"] for row in response.json()["results"]]

    assert ids(f"cluster={north.pk}") == [ours.pk]
    assert ids("cluster_name=south") == [theirs.pk]
    assert ids("valid_at=2026-05-01&ordering=cluster__name") == [ours.pk, theirs.pk]
    assert ids("valid_at=2025-12-31") == []


def test_a_cluster_with_energy_prices_cannot_be_deleted(admin_api, north):
    factories.energy_price(north, valid_from=NEW_YEAR)
    response = admin_api.delete(f"/api/v1/clusters/{north.pk}")
    assert response.status_code == 409
    assert "energy prices still refer to it" in response.json()["detail"]
