"""Debian's Chromium for the page benchmarks, signed in as a session (never a downloaded browser)."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
VIEWPORT = {"width": 1920, "height": 1080}


@contextmanager
def signed_in_context(origin: str, session: str) -> Iterator[Any]:
    """A Playwright browser context on ``origin`` holding the ``sessionid`` cookie ``session``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--disable-gpu"])
        context = browser.new_context(base_url=origin, viewport=VIEWPORT)
        context.add_cookies([{"name": "sessionid", "value": session, "url": origin}])
        try:
            yield context
        finally:
            browser.close()
