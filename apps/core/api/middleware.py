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

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse


class ReleaseRenderedApiResponses:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        context = getattr(response, "renderer_context", None)
        if context is not None and getattr(response, "is_rendered", False):
            view = context.get("view")
            if getattr(view, "response", None) is response:
                view.response = None
            response.renderer_context = None
        return response
