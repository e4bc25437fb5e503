"""The admin pages of the price book show each derived figure next to the inputs it came from."""

import pytest
from django.test import Client

from apps.accounts.models import User
from apps.costs.models import GpuPrice
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_browser(db, settings) -> Client:
    # Admin pages link their CSS; the manifest storage wants collectstatic, which tests do not run.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "not-used"))
    return client


def test_the_gpu_price_page_shows_the_amortised_figure_with_its_formula(admin_browser, owned_h100_price):
    response = admin_browser.get(f"/admin/costs/gpuprice/{owned_h100_price.pk}/change/", secure=True)
    assert response.status_code == 200
    assert "1.1764 USD/GPU-hour = (250000 / 4 + 20000) / 8766 / 8" in response.content.decode()


def test_the_gpu_price_list_shows_the_figure_per_row(admin_browser, owned_h100_price):
    response = admin_browser.get("/admin/costs/gpuprice/", secure=True)
    assert response.status_code == 200
    assert "1.1764 USD/GPU-hour" in response.content.decode()


def test_an_empty_add_form_renders(admin_browser):
    response = admin_browser.get("/admin/costs/gpuprice/add/", secure=True)
    assert response.status_code == 200
    assert "Shown once saved." in response.content.decode()


def test_the_admin_refuses_an_overlapping_price(admin_browser, owned_h100_price, h100):
    response = admin_browser.post(
        "/admin/costs/gpuprice/add/",
        {
            "node_type": h100.pk,
            "kind": "on_demand",
            "currency": "USD",
            "hourly_price_per_gpu": "2",
            "valid_from": "2026-05-01",
        },
        secure=True,
    )
    assert response.status_code == 200  # the form again, with the error
    assert "end that one first by setting its valid_to to 2026-05-01" in response.content.decode()
    assert GpuPrice.objects.count() == 1


def test_the_energy_price_page_shows_the_cost_of_a_kw_hour(admin_browser):
    price = factories.energy_price(factories.cluster("north"), valid_from=NEW_YEAR, price_per_kwh="0.1", pue="1.2")
    response = admin_browser.get(f"/admin/costs/energyprice/{price.pk}/change/", secure=True)
    assert response.status_code == 200
    assert "0.1200 USD/hour = 0.1 × 1.2 × 1" in response.content.decode()
