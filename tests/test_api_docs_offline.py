"""The interactive API docs work on a closed network: their assets come from our static files."""

import re

import pytest


@pytest.mark.django_db
def test_api_docs_load_no_asset_from_another_host(client):
    page = client.get("/api/docs/").content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources, "the docs page should reference its assets"
    assert all(not s.startswith(("http://", "https://", "//")) for s in sources), sources
    assert any("swagger-ui" in s for s in sources)
