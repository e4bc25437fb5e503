"""The page header links the Django admin for those who can use it: admins (by role) with staff
access, which the admin site itself requires."""

import pytest
from django.test import Client

from apps.accounts.models import User

pytestmark = pytest.mark.django_db

ADMIN_LINK = '<a href="/admin/">Admin</a>'


def header_of(**fields: object) -> str:
    client = Client()
    client.force_login(User.objects.create_user("someone", **fields))
    response = client.get("/nodes/")
    assert response.status_code == 200
    return response.content.decode().split("</header>")[0]


@pytest.mark.parametrize(
    "fields",
    [{"role": "admin", "is_staff": True}, {"role": "viewer", "is_staff": True, "is_superuser": True}],
    ids=["admin", "superuser"],
)
def test_it_links_the_admin_for_an_admin_with_staff_access(fields):
    assert ADMIN_LINK in header_of(**fields)


@pytest.mark.parametrize(
    "fields",
    [{"role": "viewer"}, {"role": "operator", "is_staff": True}, {"role": "admin", "is_staff": False}],
    ids=["viewer", "operator-with-staff-access", "admin-without-staff-access"],
)
def test_it_links_the_admin_for_nobody_else(fields):
    header = header_of(**fields)
    assert 'href="/api/docs/"' in header  # the header it looks in is the real one
    assert ADMIN_LINK not in header
