"""Energy per hour: kWh price × PUE × IT load in kW."""

from decimal import Decimal

import pytest

from apps.costs.rates import energy_cost_per_hour
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db


@pytest.fixture
def north():
    return factories.cluster("north")


def test_it_charges_the_facility_overhead_on_top_of_the_it_load(north):
    price = factories.energy_price(north, valid_from=NEW_YEAR, price_per_kwh="0.12", pue="1.3")
    # One HGX H100 node drawing 5.6 kW: 0.12 × 1.3 × 5.6 = 0.8736 per hour.
    figure = energy_cost_per_hour(north, 5600, NEW_YEAR)
    assert figure.value == Decimal("0.8736")
    assert figure.unit == "USD/hour"
    assert figure.formula == "0.12 × 1.3 × 5.6"
    assert figure.inputs == {
        "price_per_kwh": Decimal("0.12000"),
        "pue": Decimal("1.300"),
        "watts": 5600,
        "kw": Decimal("5.6"),
    }
    assert figure.source == f"Energy price #{price.pk} for north (valid from 2026-01-01, open-ended)"


def test_it_rounds_half_up_to_a_hundredth_of_a_cent(north):
    factories.energy_price(north, valid_from=NEW_YEAR, price_per_kwh="0.12345", pue="1")
    assert energy_cost_per_hour(north, 1000, NEW_YEAR).value == Decimal("0.1235")


def test_it_costs_nothing_at_no_load(north):
    factories.energy_price(north, valid_from=NEW_YEAR)
    assert energy_cost_per_hour(north, Decimal(0), NEW_YEAR).value == Decimal("0.0000")


def test_it_refuses_a_negative_load(north):
    factories.energy_price(north, valid_from=NEW_YEAR)
    with pytest.raises(ValueError, match=r"An IT load cannot be negative \(got -1 W\)"):
        energy_cost_per_hour(north, -1, NEW_YEAR)


def test_it_quotes_the_price_of_a_kw_hour_with_overhead(north):
    price = factories.energy_price(
        north,
        valid_from=NEW_YEAR,
        price_per_kwh="0.09",
        pue="1.25",
    )
    figure = price.cost_per_kw_hour()
    assert (figure.value, figure.formula) == (Decimal("0.1125"), "0.09 × 1.25 × 1")
