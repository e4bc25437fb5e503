"""What one GPU-hour costs under a price: the hourly price, or owned hardware amortised."""

from decimal import Decimal

import pytest

from apps.costs.choices import PriceKind
from apps.costs.models import HOURS_PER_YEAR
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db


def test_it_amortises_an_owned_node_over_its_life_plus_operating_cost(owned_h100_price):
    figure = owned_h100_price.hourly_cost_per_gpu()
    # (250,000 / 4 + 20,000) / 8766 / 8 = 82,500 / 70,128 = 1.17642026..., quoted to 1/100 cent.
    assert figure.value == Decimal("1.1764")
    assert figure.unit == "USD/GPU-hour"
    assert figure.formula == "(250000 / 4 + 20000) / 8766 / 8"


def test_it_shows_every_input_of_the_amortised_figure(owned_h100_price):
    figure = owned_h100_price.hourly_cost_per_gpu()
    assert figure.inputs == {
        "purchase_price_per_node": Decimal("250000.00"),
        "life_years": Decimal("4.00"),
        "yearly_operating_cost_per_node": Decimal("20000.00"),
        "hours_per_year": 8766,
        "gpus_per_node": 8,
    }
    assert figure.source == (
        f"GPU price #{owned_h100_price.pk} for hgx-h100 (owned (amortised), valid from 2026-01-01, open-ended)"
    )


def test_it_counts_a_year_as_365_25_days():
    assert HOURS_PER_YEAR == 8766 == 365.25 * 24


def test_it_rounds_half_up_to_a_hundredth_of_a_cent():
    four_gpu = factories.node_type("four-gpu", nics=0, gpus=4)
    # 876,643.83 / 25 / 8766 / 4 = 1.00005 exactly: half-even would give 1.0000.
    price = factories.gpu_price(
        four_gpu,
        valid_from=NEW_YEAR,
        kind=PriceKind.OWNED,
        purchase_price_per_node=Decimal("876643.83"),
        life_years=Decimal("25"),
        yearly_operating_cost_per_node=Decimal("0"),
    )
    figure = price.hourly_cost_per_gpu()
    assert figure.value == Decimal("1.0001")
    assert figure.formula == "(876643.83 / 25 + 0) / 8766 / 4"


def test_it_divides_by_the_gpus_a_node_type_has(h100):
    two_gpu = factories.node_type("two-gpu", nics=0, gpus=2)
    owned = {
        "kind": PriceKind.OWNED,
        "purchase_price_per_node": Decimal("87660"),
        "life_years": Decimal("5"),
        "yearly_operating_cost_per_node": Decimal("0"),
    }
    # 87,660 / 5 = 17,532 a year = 2 per node-hour: 1 per GPU-hour on two GPUs, 0.25 on eight.
    assert factories.gpu_price(two_gpu, valid_from=NEW_YEAR, **owned).hourly_cost_per_gpu().value == Decimal("1.0000")
    assert factories.gpu_price(h100, valid_from=NEW_YEAR, **owned).hourly_cost_per_gpu().value == Decimal("0.2500")


@pytest.mark.parametrize("kind", [PriceKind.ON_DEMAND, PriceKind.RESERVED])
def test_it_takes_a_cloud_price_as_it_is(h100, kind):
    price = factories.gpu_price(
        h100, valid_from=NEW_YEAR, kind=kind, hourly_price_per_gpu=Decimal("2.4900"), currency="EUR"
    )
    figure = price.hourly_cost_per_gpu()
    assert figure.value == Decimal("2.4900")
    assert figure.unit == "EUR/GPU-hour"
    assert figure.formula == f"2.49 ({PriceKind(kind).label.lower()} price per GPU-hour)"
    assert figure.inputs == {"hourly_price_per_gpu": Decimal("2.4900")}
