"""A cluster's hourly cost: every node that is not retired, per node type, at the prices in force."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.costs.rates import cluster_cost_rate
from apps.inventory.choices import Lifecycle
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db

AT = date(2026, 3, 1)


@pytest.fixture
def north():
    return factories.cluster("north")


@pytest.fixture
def b200(db):
    return factories.node_type("hgx-b200", nics=0)


@pytest.fixture
def fleet(north, h100, b200, owned_h100_price):
    """Four H100 nodes in different states (one retired), two rented B200 nodes, one unpriced type."""
    for state in (Lifecycle.IN_SERVICE, Lifecycle.IN_SERVICE, Lifecycle.QUARANTINED, Lifecycle.DRAINED):
        factories.node(north, h100, lifecycle=state)
    factories.node(north, h100, lifecycle=Lifecycle.RETIRED)
    factories.node(north, b200, lifecycle=Lifecycle.IN_SERVICE)
    factories.node(north, b200, lifecycle=Lifecycle.BURN_IN)
    factories.gpu_price(b200, valid_from=NEW_YEAR, hourly_price_per_gpu=Decimal("3.7500"))
    mi300 = factories.node_type("mi300x", nics=0)
    factories.node(north, mi300, lifecycle=Lifecycle.NEW)
    factories.node(factories.cluster("south"), h100)  # another cluster's node
    return north


def test_it_sums_gpus_times_price_over_node_types(fleet, owned_h100_price):
    rate = cluster_cost_rate(fleet, AT)
    # 4 H100 nodes × 8 GPUs × 1.1764 + 2 B200 nodes × 8 GPUs × 3.75 = 37.6448 + 60 = 97.6448
    assert rate.total.value == Decimal("97.6448")
    assert rate.total.unit == "USD/hour"
    assert rate.total.formula == "16 × 3.75 + 32 × 1.1764"
    assert rate.total.inputs == {
        "hgx-b200.gpus": 16,
        "hgx-b200.price_per_gpu_hour": Decimal("3.7500"),
        "hgx-h100.gpus": 32,
        "hgx-h100.price_per_gpu_hour": Decimal("1.1764"),
    }
    assert rate.total.source.startswith("GPU prices in force on 2026-03-01: GPU price #")


def test_it_breaks_the_rate_down_per_node_type_with_nodes_per_state(fleet):
    rate = cluster_cost_rate(fleet, AT)
    h100 = next(line for line in rate.breakdown if line.node_type == "hgx-h100")
    assert (h100.nodes, h100.gpus, h100.gpus_per_node) == (4, 32, 8)
    assert h100.nodes_by_state == {Lifecycle.IN_SERVICE: 2, Lifecycle.QUARANTINED: 1, Lifecycle.DRAINED: 1}
    assert h100.price_per_gpu_hour.formula == "(250000 / 4 + 20000) / 8766 / 8"
    assert h100.rate.value == Decimal("37.6448")
    assert h100.rate.formula == "32 × 1.1764"
    assert h100.rate.inputs == {
        "nodes": 4,
        "gpus_per_node": 8,
        "gpus": 32,
        "price_per_gpu_hour": Decimal("1.1764"),
    }
    assert [line.node_type for line in rate.breakdown] == ["hgx-b200", "hgx-h100", "mi300x"]


def test_it_counts_every_state_but_retired(fleet):
    rate = cluster_cost_rate(fleet, AT)
    assert set(rate.counted_states) == set(Lifecycle.values) - {Lifecycle.RETIRED}
    assert sum(line.nodes for line in rate.breakdown) == 7


def test_it_notes_node_types_without_a_price_and_leaves_them_out(fleet):
    rate = cluster_cost_rate(fleet, AT)
    mi300 = next(line for line in rate.breakdown if line.node_type == "mi300x")
    assert (mi300.nodes, mi300.price_per_gpu_hour, mi300.rate) == (1, None, None)
    assert rate.complete is False
    assert "mi300x: no GPU price in force on 2026-03-01, so the total leaves out its 1 node (8 GPUs)." in rate.notes


def test_it_is_complete_when_every_node_type_is_priced(north, h100, owned_h100_price):
    factories.node(north, h100)
    rate = cluster_cost_rate(north, AT)
    assert rate.complete is True
    assert rate.total.value == Decimal("9.4112")
    assert rate.notes == ["Node counts are the fleet as it is now; only the prices are those in force on 2026-03-01."]


def test_it_gives_no_total_across_currencies(north, h100, b200, owned_h100_price):
    factories.node(north, h100)
    factories.node(north, b200)
    factories.gpu_price(b200, valid_from=NEW_YEAR, currency="EUR")
    rate = cluster_cost_rate(north, AT)
    assert rate.total is None
    assert [line.rate.unit for line in rate.breakdown] == ["EUR/hour", "USD/hour"]
    assert "Prices are in EUR and USD; the price book holds no exchange rates" in rate.notes[0]


def test_it_has_no_total_for_a_cluster_without_costed_nodes(north, h100):
    factories.node(north, h100, lifecycle=Lifecycle.RETIRED)
    rate = cluster_cost_rate(north, timezone.localdate())
    assert (rate.total, rate.breakdown) == (None, [])
    assert rate.notes == ["The cluster has no nodes in the states that cost money."]


def test_it_warns_only_for_past_dates_that_the_fleet_is_todays(north, h100):
    factories.gpu_price(h100, valid_from=date(2000, 1, 1))
    factories.node(north, h100)
    today = timezone.localdate()
    assert cluster_cost_rate(north, today).notes == []
    assert cluster_cost_rate(north, today + timedelta(days=30)).notes == []
    assert len(cluster_cost_rate(north, today - timedelta(days=1)).notes) == 1


def test_it_takes_three_queries_whatever_the_fleet_size(fleet, django_assert_num_queries):
    with django_assert_num_queries(3):
        cluster_cost_rate(fleet, AT)
