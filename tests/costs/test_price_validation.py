"""What the price book refuses: fields that do not fit the kind, non-positive money, bad dates."""

from datetime import date
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from apps.costs.choices import PriceKind
from apps.costs.models import EnergyPrice, GpuPrice
from tests import factories
from tests.costs.conftest import H100_OWNED, NEW_YEAR

pytestmark = pytest.mark.django_db


def errors_of(price: GpuPrice | EnergyPrice) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        price.full_clean()
    return caught.value.message_dict


def test_it_requires_purchase_life_and_operating_cost_for_owned_hardware(h100):
    errors = errors_of(GpuPrice(node_type=h100, kind=PriceKind.OWNED, valid_from=NEW_YEAR))
    assert errors == {
        "purchase_price_per_node": ["Required for owned hardware."],
        "life_years": ["Required for owned hardware."],
        "yearly_operating_cost_per_node": ["Required for owned hardware."],
    }


def test_it_refuses_an_hourly_price_on_owned_hardware(h100):
    price = GpuPrice(node_type=h100, valid_from=NEW_YEAR, hourly_price_per_gpu=Decimal("2"), **H100_OWNED)
    assert "it is amortised from purchase_price_per_node" in errors_of(price)["hourly_price_per_gpu"][0]


@pytest.mark.parametrize("kind", [PriceKind.ON_DEMAND, PriceKind.RESERVED])
def test_it_requires_an_hourly_price_for_cloud_capacity(h100, kind):
    errors = errors_of(GpuPrice(node_type=h100, kind=kind, valid_from=NEW_YEAR))
    assert errors == {"hourly_price_per_gpu": [f"Required for {PriceKind(kind).label.lower()} prices."]}


def test_it_refuses_owned_hardware_fields_on_a_cloud_price(h100):
    price = GpuPrice(
        node_type=h100,
        kind=PriceKind.RESERVED,
        valid_from=NEW_YEAR,
        hourly_price_per_gpu=Decimal("1.90"),
        life_years=Decimal("3"),
    )
    assert errors_of(price) == {"life_years": ["Only for owned hardware; leave it empty for reserved prices."]}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("purchase_price_per_node", Decimal("0")),
        ("purchase_price_per_node", Decimal("-1")),
        ("life_years", Decimal("0")),
        ("yearly_operating_cost_per_node", Decimal("-0.01")),
    ],
)
def test_it_refuses_money_and_life_that_are_not_positive(h100, field, value):
    price = GpuPrice(node_type=h100, valid_from=NEW_YEAR, **{**H100_OWNED, field: value})
    assert field in errors_of(price)


def test_it_allows_no_operating_cost(h100):
    GpuPrice(node_type=h100, valid_from=NEW_YEAR, **{**H100_OWNED, "yearly_operating_cost_per_node": 0}).full_clean()


def test_it_refuses_a_zero_hourly_price(h100):
    price = GpuPrice(node_type=h100, kind=PriceKind.ON_DEMAND, valid_from=NEW_YEAR, hourly_price_per_gpu=Decimal(0))
    assert errors_of(price) == {"hourly_price_per_gpu": ["Must be greater than zero."]}


@pytest.mark.parametrize("valid_to", [NEW_YEAR, date(2025, 12, 31)])
def test_it_requires_valid_to_after_valid_from(h100, valid_to):
    price = GpuPrice(node_type=h100, valid_from=NEW_YEAR, valid_to=valid_to, **H100_OWNED)
    assert errors_of(price) == {
        "valid_to": ["Must be after valid_from: it is the first day the price no longer applies."]
    }


@pytest.mark.parametrize("currency", ["usd", "US", "DOLLAR"])
def test_it_requires_an_iso_currency_code(h100, currency):
    price = GpuPrice(node_type=h100, valid_from=NEW_YEAR, currency=currency, **H100_OWNED)
    assert "ISO 4217" in errors_of(price)["currency"][0]


def test_it_refuses_a_pue_below_one():
    price = EnergyPrice(
        cluster=factories.cluster(), valid_from=NEW_YEAR, price_per_kwh=Decimal("0.1"), pue=Decimal("0.95")
    )
    assert errors_of(price) == {"pue": ["A PUE cannot be below 1.0 (facility power ÷ IT power)."]}


def test_it_refuses_a_free_or_negative_energy_price():
    price = EnergyPrice(
        cluster=factories.cluster(), valid_from=NEW_YEAR, price_per_kwh=Decimal("0"), pue=Decimal("1.2")
    )
    assert errors_of(price) == {"price_per_kwh": ["Must be greater than zero."]}


@pytest.mark.parametrize(
    "change",
    [
        {"hourly_price_per_gpu": Decimal("2")},  # owned with an hourly price
        {"life_years": None},  # owned without a life
        {"kind": PriceKind.ON_DEMAND},  # cloud kind with owned fields and no hourly price
        {"purchase_price_per_node": Decimal("-5")},
        {"valid_to": NEW_YEAR},
    ],
)
def test_the_database_refuses_what_clean_would_have_refused(owned_h100_price, change):
    # A bulk update skips clean(); the CHECK constraints are the backstop.
    with pytest.raises(IntegrityError), transaction.atomic():
        GpuPrice.objects.filter(pk=owned_h100_price.pk).update(**change)


@pytest.mark.parametrize("change", [{"pue": Decimal("0.9")}, {"price_per_kwh": Decimal("0")}])
def test_the_database_refuses_a_bad_energy_price(change):
    price = factories.energy_price(factories.cluster(), valid_from=NEW_YEAR)
    with pytest.raises(IntegrityError), transaction.atomic():
        EnergyPrice.objects.filter(pk=price.pk).update(**change)
