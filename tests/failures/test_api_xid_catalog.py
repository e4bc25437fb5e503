"""/api/v1/xid-catalog: the catalog the control plane judges XIDs by."""

import pytest

from apps.accounts.roles import Role
from apps.failures import xid as catalog

pytestmark = pytest.mark.django_db

URL = "/api/v1/xid-catalog"


def test_it_refuses_anonymous_reads(api_client):
    assert api_client("anonymous").get(URL).status_code == 401


def test_a_viewer_reads_every_entry(api_client):
    rows = api_client(Role.VIEWER).get(URL).json()
    assert [row["code"] for row in rows] == sorted(catalog.CATALOG)
    xid79 = next(row for row in rows if row["code"] == 79)
    assert (xid79["severity"], xid79["category"], xid79["fatal"], xid79["known"]) == ("critical", "pcie", True, True)
    assert 45 in xid79["side_effects"]


def test_one_entry_by_code(api_client):
    body = api_client(Role.VIEWER).get(f"{URL}/63").json()
    assert body["title"] == "XID 63: ECC page retirement or row remapping recording event"
    assert body["side_effects"] == []


def test_an_unlisted_xid_answers_with_the_generic_entry(api_client):
    body = api_client(Role.VIEWER).get(f"{URL}/321").json()
    assert (body["known"], body["severity"]) == (False, "warning")
    assert "Look up XID 321" in body["action"]


def test_an_xid_out_of_range_is_a_404(api_client):
    response = api_client(Role.VIEWER).get(f"{URL}/5000")
    assert response.status_code == 404
    assert "out of range" in response.json()["detail"]
