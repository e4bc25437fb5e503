"""API responses freed with their request instead of by the garbage collector.

Django REST framework leaves every response in reference cycles: its renderer context holds the
response itself once it is rendered, and the view, which holds the response (``view.response``) and
is itself in a cycle with its request. So a response's data, a chart's thousands of point lists,
outlives the request until a collection finds the cycles, and that collection frees it in the
middle of whatever request is running then: at 1,000 nodes those were the slow tail of the chart
endpoint (a young-generation collection freeing a few requests' data took 60-140 ms, against 30-50
ms for a request; benchmarks/telemetry_queries.py). Once the response is rendered, its renderer
context has served, and the view is done with it: the context is dropped and the view's link cut,
and the response goes when its last reference does.
"""

from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware


def release(response: HttpResponse) -> HttpResponse:
    """Cut a rendered DRF response out of its cycles: its renderer context dropped, its view's link cut."""
    context = getattr(response, "renderer_context", None)
    if context is not None and getattr(response, "is_rendered", False):
        view = context.get("view")
        if getattr(view, "response", None) is response:
            view.response = None
        response.renderer_context = None
    return response


@sync_and_async_middleware
def release_rendered_api_responses(get_response: Callable) -> Callable:
    """Either kind of chain: this project's handler runs its chain synchronously (controlplane/http.py),
    and a synchronous-only middleware would make Django's own async chain hop threads once more."""
    if iscoroutinefunction(get_response):
        call: Callable[[HttpRequest], Awaitable[HttpResponse]] = get_response

        async def releasing(request: HttpRequest) -> HttpResponse:
            return release(await call(request))

        return releasing

    def releasing_sync(request: HttpRequest) -> HttpResponse:
        return release(get_response(request))

    return releasing_sync
