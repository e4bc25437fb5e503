"""/api/v1/gpu-prices: the GPU price book, each row with its cost per GPU-hour worked out."""

from datetime import date

import pytest

from apps.accounts.roles import Role
from apps.costs.choices import PriceKind
from apps.costs.models import GpuPrice
from tests import factories
from tests.costs.conftest import H100_OWNED, NEW_YEAR

pytestmark = pytest.mark.django_db

URL = "/api/v1/gpu-prices"


def owned_body(type_, **changes) -> dict:
    return {
        "node_type": type_.pk,
        "kind": "owned",
        "purchase_price_per_node": "250000",
        "life_years": "4",
        "yearly_operating_cost_per_node": "20000",
        "valid_from": "2026-01-01",
        **changes,
    }


def test_it_creates_an_owned_price_and_shows_the_amortised_figure(admin_api, h100):
    response = admin_api.post(URL, owned_body(h100, notes="PO 4711"))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["node_type_name"] == "hgx-h100"
    assert body["currency"] == "USD"
    assert body["hourly_price_per_gpu"] is None
    assert body["valid_to"] is None
    assert body["hourly_cost_per_gpu"] == {
        "value": "1.1764",
        "unit": "USD/GPU-hour",
        "formula": "(250000 / 4 + 20000) / 8766 / 8",
        "inputs": {
            "purchase_price_per_node": "250000.00",
            "life_years": "4.00",
            "yearly_operating_cost_per_node": "20000.00",
            "hours_per_year": 8766,
            "gpus_per_node": 8,
        },
        "source": f"GPU price #{body['id']} for hgx-h100 (owned (amortised), valid from 2026-01-01, open-ended)",
    }


def test_it_names_each_field_the_kind_needs(admin_api, h100):
    response = admin_api.post(URL, {"node_type": h100.pk, "kind": "owned", "valid_from": "2026-01-01"})
    assert response.status_code == 400
    assert response.json() == {
        "purchase_price_per_node": ["Required for owned hardware."],
        "life_years": ["Required for owned hardware."],
        "yearly_operating_cost_per_node": ["Required for owned hardware."],
    }
    assert not GpuPrice.objects.exists()


def test_it_refuses_changing_the_kind_without_clearing_the_owned_fields(admin_api, owned_h100_price):
    response = admin_api.patch(f"{URL}/{owned_h100_price.pk}", {"kind": "on_demand", "hourly_price_per_gpu": "2.5"})
    assert response.status_code == 400
    assert set(response.json()) == set(GpuPrice.OWNED_FIELDS)
    owned_h100_price.refresh_from_db()
    assert owned_h100_price.kind == PriceKind.OWNED


def test_it_changes_the_kind_when_the_owned_fields_are_cleared(admin_api, owned_h100_price):
    cleared = dict.fromkeys(GpuPrice.OWNED_FIELDS)
    response = admin_api.patch(
        f"{URL}/{owned_h100_price.pk}", {"kind": "reserved", "hourly_price_per_gpu": "1.8", **cleared}
    )
    assert response.status_code == 200, response.content
    assert response.json()["hourly_cost_per_gpu"]["value"] == "1.8000"


def test_it_refuses_an_overlapping_price_and_says_how_to_fix_it(admin_api, owned_h100_price, h100):
    response = admin_api.post(URL, owned_body(h100, valid_from="2026-06-01"))
    assert response.status_code == 400
    assert "end that one first by setting its valid_to to 2026-06-01" in response.json()["valid_from"][0]
    assert GpuPrice.objects.count() == 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"purchase_price_per_node": "-1"}, "purchase_price_per_node"),
        ({"life_years": "0"}, "life_years"),
        ({"purchase_price_per_node": "1.234"}, "purchase_price_per_node"),
        ({"kind": "leased"}, "kind"),
        ({"currency": "usd"}, "currency"),
        ({"valid_to": "2025-12-31"}, "valid_to"),
        ({"valid_from": "1 Jan 2026"}, "valid_from"),
        ({"node_type": 999_999}, "node_type"),
    ],
)
def test_it_refuses_bad_values_naming_the_field(admin_api, h100, changes, field):
    response = admin_api.post(URL, owned_body(h100, **changes))
    assert response.status_code == 400
    assert field in response.json()
    assert not GpuPrice.objects.exists()


def test_it_filters_by_the_date_a_price_is_in_force(api_client, h100):
    old = factories.gpu_price(h100, valid_from=NEW_YEAR, valid_to=date(2026, 7, 1))
    new = factories.gpu_price(h100, valid_from=date(2026, 7, 1), **H100_OWNED)
    client = api_client(Role.VIEWER)

    def ids(query: str) -> list[int]:
        response = client.get(f"{URL}?{query}")
        assert response.status_code == 200, response.content
        return [row["id"] for row in response.json()["results"]]

    assert ids("valid_at=2026-06-30") == [old.pk]
    assert ids("valid_at=2026-07-01") == [new.pk]
    assert ids("valid_at=2025-01-01") == []
    assert ids("kind=owned") == [new.pk]
    assert ids(f"node_type={h100.pk}&ordering=valid_from") == [old.pk, new.pk]
    assert ids("node_type_name=hgx-h100&kind=on_demand") == [old.pk]


def test_it_refuses_a_malformed_filter_date(api_client):
    response = api_client(Role.VIEWER).get(f"{URL}?valid_at=yesterday")
    assert response.status_code == 400
    assert "valid_at" in response.json()


def test_a_node_type_with_prices_cannot_be_deleted(admin_api, owned_h100_price, h100):
    response = admin_api.delete(f"/api/v1/node-types/{h100.pk}")
    assert response.status_code == 409
    assert "GPU prices still refer to it" in response.json()["detail"]
