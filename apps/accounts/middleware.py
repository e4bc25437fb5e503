from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse

from apps.accounts.audit import record_request

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class AuditLogMiddleware:
    """Writes one audit row for every request that could change state, whatever its outcome.

    It runs after the view, outside the view's transaction, so refused and failed attempts are
    kept as well (with their status code). DRF copies the user and token it authenticated onto the
    underlying request, which is how token-authenticated API calls get their actor.

    Sync and async: under ASGI the middleware chain stays async end to end. A sync-only middleware
    in the middle made every request hop from the event loop to a thread and back twice more, and
    each hop back waits its turn behind the loop's WebSocket traffic: at 1,000 agents that cost a
    page several hundred milliseconds.
    """

    sync_capable = True
    async_capable = True

    def __init__(
        self, get_response: Callable[[HttpRequest], HttpResponse] | Callable[[HttpRequest], Awaitable[HttpResponse]]
    ) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if iscoroutinefunction(self):
            return self.__acall__(request)
        response = self.get_response(request)
        if request.method not in SAFE_METHODS:
            record_request(request, response.status_code)
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        response = await self.get_response(request)
        if request.method not in SAFE_METHODS:
            await sync_to_async(record_request)(request, response.status_code)
        return response
