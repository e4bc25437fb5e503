"""The ASGI server's HTTP side: a request's middleware and view run on one thread, entered once.

Django's own ASGI handler builds its middleware chain for the event loop. Each of Django's
middleware (MiddlewareMixin) then runs its ``process_request`` and its ``process_response`` on a
thread through ``sync_to_async`` and comes back to the loop after each, and a synchronous-only one
(the audit log's) calls the rest of the chain back on the loop through ``async_to_sync``: a page
view went back and forth about twenty times. Every return waits its turn on a loop that also carries
every agent's socket: under benchmarks/dashboard.py's 1,000 nodes, 0.3-0.9 s of a fleet page's
time before its first byte was spent in those waits, against 20-40 ms of CPU for the view itself.

``ASGIHandler`` builds the chain as Django's WSGI handler does, synchronous throughout, and runs it
with one ``sync_to_async`` on the request's thread (asgiref's thread-sensitive context gives each
request one), so a request meets the loop when it arrives and when its response leaves. Views are
synchronous here; a streaming response's async iterator is still consumed on the loop.

Static files go through the same chain, so that they keep the security headers and the
Content-Security-Policy (a worker's script brings its worker's policy). servestatic's middleware is
async-only; ``StaticFiles`` serves the same table (the manifest's files, their compressed variants,
their cache headers), built by it, from the request's thread.
"""

import contextlib
from collections.abc import Callable

import django
from asgiref.sync import sync_to_async
from django.core.handlers import asgi
from django.http import HttpRequest, HttpResponse
from servestatic.middleware import ServeStaticMiddleware


class ASGIHandler(asgi.ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        self._middleware_chain = sync_to_async(self._middleware_chain, thread_sensitive=True)


def get_asgi_application() -> ASGIHandler:
    """What ``django.core.asgi.get_asgi_application`` is, with this module's handler."""
    django.setup(set_prefix=False)
    return ASGIHandler()


async def _not_called(request: HttpRequest) -> HttpResponse:
    raise AssertionError("StaticFiles passes requests on itself")


class StaticFiles:
    """servestatic's static files, served from the request's thread (in place of its middleware)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.table = ServeStaticMiddleware(_not_called)  # reads the same settings, builds the same table

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info
        found = self.table.find_file(path) if self.table.autorefresh else self.table.files.get(path)
        if found is None:
            return self.get_response(request)
        answer = found.get_response(request.method or "GET", request.META)
        # Read whole: the dashboard's files are tens of kilobytes, and a body in memory leaves the
        # thread at once instead of being read back from the loop a block at a time.
        with answer.file or contextlib.nullcontext():
            body = answer.file.read() if answer.file else b""
        response = HttpResponse(body, status=int(answer.status))
        del response["Content-Type"]  # servestatic's headers say it
        for name, value in answer.headers:
            if value is not None:
                response[name] = value
        return response
