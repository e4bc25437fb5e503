"""The ASGI server's HTTP side (controlplane/http.py): a request's middleware and view run on its
thread, entered once, and static files are served from that thread with the pages' headers."""

import asyncio
from pathlib import Path

import pytest
from asgiref.sync import SyncToAsync
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler as DjangosASGIHandler
from django.db import DEFAULT_DB_ALIAS, connections

from controlplane.http import ASGIHandler

pytestmark = pytest.mark.django_db(transaction=True)  # the request's thread has a connection of its own
FLEET_JS = Path(__file__).resolve().parents[1] / "apps/dashboard/static/dashboard/fleet.js"


@pytest.fixture(autouse=True)
def _requests_close_their_connections(monkeypatch) -> None:
    """Each request's thread opens a connection of its own, closed as its request finishes."""
    monkeypatch.setitem(connections.settings[DEFAULT_DB_ALIAS], "CONN_MAX_AGE", 0)


@pytest.fixture
def thread_entries(monkeypatch) -> list[str]:
    """Every call from the loop onto a thread (asgiref's ``sync_to_async``), by what it ran."""
    entries: list[str] = []
    call = SyncToAsync.__call__

    def counted(self: SyncToAsync, *args, **kwargs):
        entries.append(getattr(self.func, "__qualname__", repr(self.func)))
        return call(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    return entries


def get(app, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }

    async def run() -> tuple[int, dict[str, str], bytes]:
        communicator = ApplicationCommunicator(app, scope)
        await communicator.send_input({"type": "http.request", "body": b""})
        start = await communicator.receive_output(10)
        body = b""
        while True:
            message = await communicator.receive_output(10)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await communicator.wait(10)
        headers = {name.decode().lower(): value.decode() for name, value in start["headers"]}
        return start["status"], headers, body

    return asyncio.run(run())


def test_a_page_runs_its_middleware_and_view_in_one_call_onto_its_thread(thread_entries):
    status, headers, body = get(ASGIHandler(), "/login/")

    assert status == 200
    assert b"<form" in body
    assert "content-security-policy" in headers  # the middleware ran
    # The request_started signal's receivers, then the whole chain, then the response's close (whose
    # request_finished receivers close the thread's database connection).
    assert thread_entries == [
        "Signal.asend.<locals>.sync_send",
        "convert_exception_to_response.<locals>.inner",
        "HttpResponseBase.close",
    ]


def test_djangos_own_handler_goes_back_and_forth_which_is_why(thread_entries):
    """What the handler is for: Django's calls onto a thread once per middleware method or more."""
    status, _, _ = get(DjangosASGIHandler(), "/login/")

    assert status == 200
    assert "View.as_view.<locals>.view" in thread_entries
    assert "MessageMiddleware.process_request" in thread_entries
    assert len(thread_entries) > 5


@pytest.fixture
def static_files(settings) -> None:
    settings.SERVESTATIC_USE_FINDERS = True  # tests do not collect static files


def test_a_static_file_is_served_whole_with_the_pages_headers(static_files, thread_entries):
    status, headers, body = get(ASGIHandler(), "/static/dashboard/fleet.js")

    assert status == 200
    assert body == FLEET_JS.read_bytes()
    assert headers["content-type"].startswith("text/javascript")
    assert headers["content-length"] == str(len(body))
    assert "max-age" in headers["cache-control"]
    assert "script-src 'self'" in headers["content-security-policy"]  # a worker's script brings its policy
    assert headers["x-content-type-options"] == "nosniff"


def test_a_head_request_for_a_static_file_has_its_headers_and_no_body(static_files):
    status, headers, body = get(ASGIHandler(), "/static/dashboard/fleet.js", method="HEAD")

    assert status == 200
    assert body == b""
    assert headers["content-length"] == str(FLEET_JS.stat().st_size)


def test_a_static_file_that_is_not_there_is_djangos_404(static_files):
    status, headers, _ = get(ASGIHandler(), "/static/dashboard/not-there.js")

    assert status == 404
    assert "content-security-policy" in headers
