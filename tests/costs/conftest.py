from datetime import date
from decimal import Decimal

import pytest

from apps.costs.choices import PriceKind
from tests import factories

NEW_YEAR = date(2026, 1, 1)

# The worked example of docs/costs.md: an HGX H100 node bought for 250,000 USD, amortised over
# 4 years, with 20,000 USD a year of support, space and staff.
H100_OWNED = {
    "kind": PriceKind.OWNED,
    "purchase_price_per_node": Decimal("250000.00"),
    "life_years": Decimal("4"),
    "yearly_operating_cost_per_node": Decimal("20000.00"),
}


@pytest.fixture
def h100(db):
    return factories.node_type("hgx-h100", nics=0)


@pytest.fixture
def owned_h100_price(h100):
    return factories.gpu_price(h100, valid_from=NEW_YEAR, **H100_OWNED)
