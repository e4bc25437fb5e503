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


def fresh_loads(context: Any, path: str, probe: str, *, loads: int, ready: str | None = None) -> list[Any]:
    """Open ``path`` in ``loads`` fresh pages; from each, once ``ready`` (a JavaScript function) holds,
    the value of ``probe``: a JavaScript expression that may read ``nav``, the load's Navigation
    Timing entry."""
    results = []
    for _ in range(loads):
        page = context.new_page()
        page.goto(path)
        if ready is not None:
            page.wait_for_function(ready, timeout=30_000)
        results.append(
            # A function, not an expression: the pages' Content-Security-Policy refuses eval.
            page.evaluate(f"() => {{ const nav = performance.getEntriesByType('navigation')[0]; return {probe}; }}")
        )
        page.close()
    return results
