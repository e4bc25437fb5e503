"""Which price is in force on a date: valid_from counts, valid_to does not."""

from datetime import date
from decimal import Decimal

import pytest

from apps.costs.models import EnergyPrice, GpuPrice
from apps.costs.rates import NoPriceInForce, energy_cost_per_hour, hourly_gpu_cost
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db

JULY = date(2026, 7, 1)


@pytest.fixture
def first_half(h100):
    return factories.gpu_price(h100, valid_from=NEW_YEAR, valid_to=JULY, hourly_price_per_gpu=Decimal("2.50"))


@pytest.fixture
def second_half(h100, first_half):
    return factories.gpu_price(h100, valid_from=JULY, hourly_price_per_gpu=Decimal("2.20"))


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (date(2025, 12, 31), None),
        (NEW_YEAR, "first_half"),
        (date(2026, 6, 30), "first_half"),
        (JULY, "second_half"),
        (date(2031, 1, 1), "second_half"),
    ],
)
def test_it_finds_the_price_in_force_at_the_boundaries(request, h100, second_half, at, expected):
    effective = GpuPrice.objects.effective(h100, at)
    assert effective == (request.getfixturevalue(expected) if expected else None)


def test_in_force_lists_one_price_per_node_type(h100, second_half):
    other = factories.node_type("hgx-b200", nics=0)
    b200 = factories.gpu_price(other, valid_from=date(2026, 3, 1))
    assert set(GpuPrice.objects.in_force(JULY)) == {second_half, b200}
    assert set(GpuPrice.objects.in_force(date(2026, 2, 1))) == {GpuPrice.objects.get(valid_to=JULY)}


def test_it_prices_a_gpu_hour_at_the_price_in_force(h100, second_half):
    assert hourly_gpu_cost(h100, date(2026, 6, 30)).value == Decimal("2.5000")
    assert hourly_gpu_cost(h100, JULY).value == Decimal("2.2000")


def test_it_says_which_periods_exist_when_none_is_in_force(h100, first_half):
    with pytest.raises(NoPriceInForce) as caught:
        hourly_gpu_cost(h100, JULY)
    assert str(caught.value) == (
        "No GPU price for hgx-h100 is in force on 2026-07-01. Its prices are: valid from 2026-01-01 until 2026-07-01."
    )


def test_it_says_when_a_node_type_has_no_price_at_all(h100):
    with pytest.raises(NoPriceInForce, match=r"The price book has none for it\."):
        hourly_gpu_cost(h100, JULY)


def test_energy_prices_are_looked_up_the_same_way():
    cluster = factories.cluster("north")
    factories.energy_price(cluster, valid_from=NEW_YEAR, valid_to=JULY, price_per_kwh="0.10")
    factories.energy_price(cluster, valid_from=JULY, price_per_kwh="0.14")
    assert EnergyPrice.objects.effective(cluster, date(2026, 6, 30)).price_per_kwh == Decimal("0.10")
    assert EnergyPrice.objects.effective(cluster, JULY).price_per_kwh == Decimal("0.14")
    with pytest.raises(NoPriceInForce, match="No energy price for north is in force on 2025-12-31"):
        energy_cost_per_hour(cluster, 1000, date(2025, 12, 31))
