"""Who may read and write the price book through the API, and the audit trail of every write.

Each resource only declares its URL, a valid body and a change; the cases are shared."""

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.db import models

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.costs.models import EnergyPrice, GpuPrice
from tests import factories
from tests.costs.conftest import NEW_YEAR

pytestmark = pytest.mark.django_db


@dataclass
class Resource:
    url: str
    model: type
    audit_name: str
    body: Callable[[], dict]
    change: dict
    build: Callable[[], models.Model]

    def create(self, client) -> dict:
        response = client.post(self.url, self.body())
        assert response.status_code == 201, response.content
        return response.json()


RESOURCES = {
    "gpu-prices": Resource(
        url="/api/v1/gpu-prices",
        model=GpuPrice,
        audit_name="gpuprice",
        body=lambda: {
            "node_type": factories.node_type(nics=0).pk,
            "kind": "on_demand",
            "hourly_price_per_gpu": "2.4900",
            "valid_from": "2026-01-01",
        },
        change={"hourly_price_per_gpu": "2.1900"},
        build=lambda: factories.gpu_price(factories.node_type(nics=0), valid_from=NEW_YEAR),
    ),
    "energy-prices": Resource(
        url="/api/v1/energy-prices",
        model=EnergyPrice,
        audit_name="energyprice",
        body=lambda: {
            "cluster": factories.cluster().pk,
            "price_per_kwh": "0.12",
            "pue": "1.3",
            "valid_from": "2026-01-01",
        },
        change={"pue": "1.250"},
        build=lambda: factories.energy_price(factories.cluster(), valid_from=NEW_YEAR),
    ),
}


@pytest.fixture(params=RESOURCES.values(), ids=RESOURCES.keys())
def resource(request) -> Resource:
    return request.param


def test_it_refuses_anonymous_reads(api_client, resource):
    assert api_client("anonymous").get(resource.url).status_code == 401


@pytest.mark.parametrize("role", [Role.VIEWER, Role.OPERATOR, Role.ADMIN])
def test_every_role_can_read(api_client, resource, role):
    price = resource.build()
    client = api_client(role)
    response = client.get(resource.url)
    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == [price.pk]
    assert client.get(f"{resource.url}/{price.pk}").status_code == 200


@pytest.mark.parametrize("role", ["anonymous", Role.VIEWER, Role.OPERATOR])
def test_only_admins_can_create(api_client, resource, role):
    response = api_client(role).post(resource.url, resource.body())
    assert response.status_code == (401 if role == "anonymous" else 403)
    assert not resource.model.objects.exists()
    assert AuditLogEntry.objects.get().status_code == response.status_code


@pytest.mark.parametrize("role", [Role.VIEWER, Role.OPERATOR])
def test_only_admins_can_change_or_delete(api_client, resource, role):
    price = resource.build()
    client = api_client(role)
    url = f"{resource.url}/{price.pk}"
    assert client.patch(url, resource.change).status_code == 403
    assert client.delete(url).status_code == 403
    assert resource.model.objects.get(pk=price.pk).updated_at == price.updated_at


def test_an_admin_create_is_audited_with_its_fields(admin_api, resource):
    created = resource.create(admin_api)
    entry = AuditLogEntry.objects.get(action=f"{resource.audit_name}.create")
    assert (entry.actor, entry.status_code, entry.object_id) == ("admin-user", 201, str(created["id"]))
    assert entry.detail["fields"]["valid_from"] == "2026-01-01"


def test_an_admin_change_is_audited_with_before_and_after(admin_api, resource):
    created = resource.create(admin_api)
    response = admin_api.patch(f"{resource.url}/{created['id']}", resource.change)
    assert response.status_code == 200, response.content
    entry = AuditLogEntry.objects.get(action=f"{resource.audit_name}.update")
    ((field, new),) = resource.change.items()
    assert entry.detail["changes"] == {field: [created[field], new]}


def test_an_admin_delete_is_audited(admin_api, resource):
    created = resource.create(admin_api)
    assert admin_api.delete(f"{resource.url}/{created['id']}").status_code == 204
    assert not resource.model.objects.exists()
    entry = AuditLogEntry.objects.get(action=f"{resource.audit_name}.delete")
    assert (entry.object_id, entry.status_code) == (str(created["id"]), 204)
