"""The prices a live page turns telemetry into money with: per GPU-hour by node type, per kW-hour
(PUE included) by cluster, and what is left unpriced."""

from datetime import date
from decimal import Decimal

import pytest

from apps.costs.rates import live_pricing
from tests import factories

pytestmark = pytest.mark.django_db

TODAY = date(2026, 11, 29)


def test_it_prices_each_type_and_cluster_in_force_and_names_what_is_not_priced():
    priced, unpriced = factories.cluster("east"), factories.cluster("west")
    h100, b200 = factories.node_type("h100"), factories.node_type("b200")
    factories.node(priced, h100)
    factories.node(unpriced, b200)
    factories.gpu_price(h100, valid_from=date(2026, 1, 1), hourly_price_per_gpu=Decimal("2.49"))
    factories.gpu_price(b200, valid_from=date(2025, 1, 1), valid_to=date(2026, 1, 1))  # expired
    factories.energy_price(priced, valid_from=date(2026, 1, 1), price_per_kwh="0.10", pue="1.5")

    pricing = live_pricing(TODAY)

    assert pricing.currency == "USD"
    assert pricing.gpu_hour == {h100.pk: Decimal("2.49")}
    assert pricing.kw_hour == {priced.pk: Decimal("0.15")}  # 0.10 × 1.5 × 1 kW
    assert pricing.unpriced == ["GPU-hours of b200", "energy in west"]


def test_prices_in_several_currencies_give_no_single_currency_to_add_them_in():
    cluster, node_type = factories.cluster(), factories.node_type()
    factories.node(cluster, node_type)
    factories.gpu_price(node_type, valid_from=date(2026, 1, 1), currency="EUR")
    factories.energy_price(cluster, valid_from=date(2026, 1, 1))

    assert live_pricing(TODAY).currency is None
