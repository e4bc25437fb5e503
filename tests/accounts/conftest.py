import pytest
from django.test import Client

from apps.accounts.models import User


@pytest.fixture
def admin_site(db, settings) -> Client:
    """A browser signed in to the Django admin as a superuser."""
    # The manifest storage needs collectstatic, which tests do not run.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    client = Client()
    client.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    return client
