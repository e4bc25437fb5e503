"""At most one price per node type (or cluster) is in force on any day."""

import threading
from datetime import date
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from apps.costs.choices import PriceKind
from apps.costs.models import EnergyPrice, GpuPrice
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db

JULY = date(2026, 7, 1)


def cloud_price(node_type, valid_from, valid_to=None):
    return GpuPrice(
        node_type=node_type,
        kind=PriceKind.ON_DEMAND,
        hourly_price_per_gpu=Decimal("2.10"),
        valid_from=valid_from,
        valid_to=valid_to,
    )


def test_it_refuses_a_price_starting_inside_an_open_ended_one(owned_h100_price, h100):
    with pytest.raises(ValidationError) as caught:
        cloud_price(h100, JULY).full_clean()
    assert caught.value.message_dict == {
        "valid_from": [
            f"Overlaps GPU price #{owned_h100_price.pk} for hgx-h100 (owned (amortised), valid from 2026-01-01, "
            "open-ended). Only one price per node type can be in force on a day: end that one first by setting "
            "its valid_to to 2026-07-01 (valid_to is exclusive, the first day a price no longer applies), or "
            "choose other dates."
        ]
    }


def test_it_refuses_a_price_running_into_a_later_one(owned_h100_price, h100):
    with pytest.raises(ValidationError) as caught:
        cloud_price(h100, date(2025, 7, 1), date(2026, 1, 2)).full_clean()
    message = caught.value.message_dict["valid_to"][0]
    assert "end this one by 2026-01-01, the day that one starts" in message


def test_it_refuses_an_open_ended_price_before_an_existing_one(owned_h100_price, h100):
    with pytest.raises(ValidationError, match="end this one by 2026-01-01"):
        cloud_price(h100, date(2025, 1, 1)).full_clean()


def test_it_accepts_a_price_that_starts_the_day_the_previous_one_ends(owned_h100_price, h100):
    owned_h100_price.valid_to = JULY
    owned_h100_price.full_clean()
    owned_h100_price.save()
    successor = cloud_price(h100, JULY)
    successor.full_clean()
    successor.save()
    assert GpuPrice.objects.filter(node_type=h100).count() == 2


def test_it_accepts_a_price_that_ends_the_day_the_next_one_starts(owned_h100_price, h100):
    predecessor = cloud_price(h100, date(2025, 1, 1), NEW_YEAR)
    predecessor.full_clean()
    predecessor.save()


def test_a_price_does_not_overlap_itself_when_edited(owned_h100_price):
    owned_h100_price.valid_to = date(2027, 1, 1)
    owned_h100_price.full_clean()
    owned_h100_price.save()


def test_prices_of_different_node_types_do_not_clash(owned_h100_price):
    other = cloud_price(factories.node_type("hgx-b200", nics=0), NEW_YEAR)
    other.full_clean()
    other.save()


def test_saving_checks_again_so_a_writer_that_skipped_clean_cannot_overlap(owned_h100_price, h100):
    with pytest.raises(ValidationError, match="Overlaps GPU price"):
        cloud_price(h100, JULY).save()
    assert GpuPrice.objects.count() == 1


def test_energy_prices_follow_the_same_rule():
    cluster = factories.cluster("north")
    first = factories.energy_price(cluster, valid_from=NEW_YEAR, valid_to=JULY)
    factories.energy_price(cluster, valid_from=JULY)  # hands over on the day
    with pytest.raises(ValidationError) as caught:
        factories.energy_price(cluster, valid_from=date(2026, 3, 1), valid_to=date(2026, 4, 1))
    assert caught.value.message_dict["valid_from"][0].startswith(
        f"Overlaps Energy price #{first.pk} for north (valid from 2026-01-01 until 2026-07-01). "
        "Only one price per cluster can be in force on a day"
    )
    assert EnergyPrice.objects.count() == 2


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has one writer at a time: no race to lose")
@pytest.mark.django_db(transaction=True)
def test_two_writers_racing_cannot_both_add_overlapping_prices(h100):
    first_saved, first_may_commit = threading.Event(), threading.Event()

    def first_writer() -> None:
        try:
            with transaction.atomic():
                cloud_price(h100, NEW_YEAR).save()
                first_saved.set()
                first_may_commit.wait(timeout=10)
        finally:
            connection.close()

    writer = threading.Thread(target=first_writer)
    writer.start()
    assert first_saved.wait(timeout=10)
    # The second writer's overlap check cannot see the first's uncommitted row; the lock on the
    # node type makes it wait until the first commits, and then it can.
    threading.Timer(0.5, first_may_commit.set).start()
    with pytest.raises(ValidationError, match="Overlaps GPU price"):
        cloud_price(h100, JULY).save()
    writer.join()
    assert GpuPrice.objects.count() == 1
