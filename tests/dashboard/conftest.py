"""A real ASGI server (uvicorn, in a thread of the test process, so it sees the test database) and the
real Redis channel layer under a prefix of its own (``redis_channel_layer``, tests/session_redis.py),
and browsers that sign in with a session cookie."""

import asyncio
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import get_channel_layer
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import Client
from playwright.sync_api import Browser as PlaywrightBrowser
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright
from websockets.sync.client import ClientConnection, connect

from apps.accounts.models import User
from controlplane import demo

# A live server's connections still open when it stops get this long to end; then their tasks are
# cancelled, so that a test's teardown never waits on one forever.
GRACEFUL_SHUTDOWN_S = 5


class LiveServer:
    def __init__(self, *, static_files: bool = False) -> None:
        """``static_files``: serve /static/ from the apps' folders, as Django's own live server does
        (tests do not collect static files)."""
        self.port = demo.free_loopback_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        app: Any = "controlplane.asgi:application"
        if static_files:
            from controlplane.asgi import application

            app = ASGIStaticFilesHandler(application)
        # With its lifespan, as in production: the process's parts are shut down as the server stops.
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            lifespan="on",
            log_level="warning",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True, name="live-server")

    async def _serve(self) -> None:
        await self._server.serve()

    def start(self) -> None:
        self._thread.start()
        for _ in range(200):
            if self._server.started:
                return
            self._thread.join(0.025)
        raise RuntimeError("uvicorn did not start within 5 s")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=GRACEFUL_SHUTDOWN_S + 10)
        # The consumers' database work runs on asgiref's one thread for thread-sensitive calls, whose
        # connections outlive the server; closed from there once the server has stopped, so that no
        # disconnect handler of its shutdown opens one again (PostgreSQL cannot drop a test database
        # that a connection still uses).
        SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=10)
        if self._thread.is_alive():
            raise RuntimeError(f"uvicorn did not stop within {GRACEFUL_SHUTDOWN_S + 10} s")

    def url(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"


@pytest.fixture
def asgi_server(transactional_db, redis_channel_layer) -> Iterator[LiveServer]:
    server = LiveServer()
    server.start()
    yield server
    server.stop()


def session_cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


class Browser:
    """A signed-in page's WebSocket to ``ws/live``, with JSON in and out."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket

    def send(self, message: object) -> None:
        self.socket.send(message if isinstance(message, str | bytes) else json.dumps(message))

    def receive(self, timeout: float = 5.0) -> dict[str, Any]:
        return json.loads(self.socket.recv(timeout=timeout))

    def request(self, message: object) -> dict[str, Any]:
        self.send(message)
        return self.receive()


@pytest.fixture
def open_browser(asgi_server: LiveServer) -> Iterator[Callable[..., Browser]]:
    """``open_browser(user=None, origin=None)``: a connected page; no user: not signed in."""
    with ExitStack() as opened:

        def open_(user: User | None = None, *, origin: str | None = None) -> Browser:
            headers = {"Cookie": f"sessionid={session_cookie(user)}"} if user else {}
            url, origin = asgi_server.url("/ws/live"), origin or asgi_server.origin
            return Browser(opened.enter_context(connect(url, origin=origin, additional_headers=headers)))

        yield open_


@pytest.fixture
def viewer(transactional_db) -> User:
    return User.objects.create_user("vera", password="unused-password-1", role="viewer")


def off_the_loop(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``function`` on a thread of its own and return what it returns (or raise what it raised).

    Browser tests need it: Playwright's sync API keeps an asyncio loop on the test's thread, and
    asgiref's async_to_sync, which publishing to browsers uses, refuses to run on a thread with one."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as error:  # re-raised on the caller's thread
            outcome["error"] = error
        finally:
            connections.close_all()  # the thread's own; left open, it would outlive the thread

    thread = threading.Thread(target=run, name=f"off-the-loop:{getattr(function, '__name__', function)}")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def group_send(group: str, message: dict[str, Any]) -> None:
    off_the_loop(async_to_sync(get_channel_layer().group_send), group, message)


# Listening to the channel layer's groups as consumers do --------------------------------------------


async def listen(*groups: str) -> dict[str, str]:
    """A channel of its own for each group, added to it as a consumer's would be: {group: channel}."""
    layer = get_channel_layer()
    channels = {group: await layer.new_channel() for group in groups}
    for group, channel in channels.items():
        await layer.group_add(group, channel)
    return channels


async def receive(channel: str, timeout: float = 5.0) -> dict[str, Any]:
    return await asyncio.wait_for(get_channel_layer().receive(channel), timeout)


async def waiting(channel: str) -> list[dict[str, Any]]:
    """Every message waiting on ``channel``, for code that has already sent all it will send (its
    sends returned): the last, empty wait only confirms that nothing more is there."""
    messages = []
    while True:
        try:
            messages.append(await receive(channel, timeout=0.2))
        except TimeoutError:
            return messages


# Real headless Chromium ---------------------------------------------------------------------------

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


@pytest.fixture
def chromium(monkeypatch) -> Iterator[PlaywrightBrowser]:
    """Debian's Chromium driven by Playwright (never a downloaded browser); .ci/run installs it.

    Playwright's sync API drives an asyncio loop of its own on the test's thread, which Django takes
    for an async context and refuses database calls in. The test's code is plain synchronous code,
    so the guard is lifted for browser tests only, and the browser lives for one test, so the loop
    never outlives it into other tests."""
    if not CHROMIUM.exists():
        pytest.fail(f"Browser tests need Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--disable-gpu"])
        yield browser
        browser.close()


# Browser tests store their samples once, as they set up: they must stay the values of now for the
# test's length however slow the machine (apps/dashboard/streams.py stale_after_s). A test of stale
# values stores samples older than this.
BROWSER_TEST_STALE_AFTER_S = 600


@pytest.fixture
def dashboard(transactional_db, redis_channel_layer, monkeypatch, settings) -> Iterator[LiveServer]:
    """The ASGI server with the dashboard's static files. Each HTTP request runs on a thread of its
    own, whose database connection would outlive it (and keep the test database from being dropped)
    unless closed when the request finishes."""
    monkeypatch.setitem(connections.settings[DEFAULT_DB_ALIAS], "CONN_MAX_AGE", 0)
    settings.AGENT_UNREACHABLE_AFTER_S = BROWSER_TEST_STALE_AFTER_S
    server = LiveServer(static_files=True)
    server.start()
    yield server
    server.stop()


class PageErrors:
    """Console errors and uncaught exceptions of every page a test opened: a test fails on any, except
    console messages holding a text the test said it expects (``open_page.expect_console_error``:
    Chromium logs every refused request, such as a 409 that a page explains to the user on purpose)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.expected: list[str] = []

    def console(self, page: Page, text: str) -> None:
        if not any(expected in text for expected in self.expected):
            self.errors.append(f"{page.url}: {text}")

    def watch(self, page: Page) -> Page:
        page.on("console", lambda message: message.type == "error" and self.console(page, message.text))
        page.on("pageerror", lambda error: self.errors.append(f"{page.url}: {error}"))
        return page


@pytest.fixture
def open_page(dashboard: LiveServer, chromium: PlaywrightBrowser) -> Iterator[Callable[..., Page]]:
    """``open_page(user, path="/", viewport=(1280, 800), dark=False, timezone_id="UTC")``: a signed-in tab
    at ``path``, its browser in that time zone and the en-US locale.
    The test fails if any page logged a JavaScript error. (The server comes before the browser, so
    it and the channel layer are torn down after it, off Playwright's loop.)"""
    errors = PageErrors()
    contexts: list[BrowserContext] = []

    def open_(
        user: User | None,
        path: str = "/",
        *,
        viewport: tuple[int, int] = (1280, 800),
        dark: bool = False,
        timezone_id: str = "UTC",
    ) -> Page:
        context = chromium.new_context(
            base_url=dashboard.origin,
            viewport={"width": viewport[0], "height": viewport[1]},
            color_scheme="dark" if dark else "light",
            timezone_id=timezone_id,
            locale="en-US",
        )
        contexts.append(context)
        if user is not None:
            context.add_cookies([{"name": "sessionid", "value": session_cookie(user), "url": dashboard.origin}])
        page = errors.watch(context.new_page())
        page.goto(path)
        return page

    open_.expect_console_error = errors.expected.append  # type: ignore[attr-defined]
    yield open_
    for context in contexts:
        context.close()
    assert not errors.errors, "JavaScript errors:\n" + "\n".join(errors.errors)


def node_action(page: Page, action: str, reason: str = "") -> None:
    """Take a node page's lifecycle action ``action`` through its dialog, and close the dialog once the
    one result is in and says it was done."""
    page.locator(f'#node-actions [data-action="{action}"]').click()
    page.locator("#action-reason").fill(reason)
    page.locator("#action-confirm").click()
    expect(page.locator("#action-results li.ok")).to_have_count(1)
    page.locator("#action-cancel").click()


def live(page: Page) -> None:
    """Wait until the page's live socket is connected (its status says so)."""
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


def screenshot(page: Page, name: str) -> Path:
    """Save the page as test-artifacts/screenshots/<name>.png (CI keeps the folder)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def operator(transactional_db) -> User:
    return User.objects.create_user("otto", password="unused-password-2", role="operator")
