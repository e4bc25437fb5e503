"""Errors an API client can read: JSON in the API's shape (``{"detail": "..."}``), never an HTML page.

DRF answers in JSON for what its views raise. What happens outside them is Django's: a path no route
matches, a body over DATA_UPLOAD_MAX_MEMORY_SIZE read before the view, an exception that escaped
everything (the 500). ``controlplane/urls.py`` installs the handlers here, which answer those in
JSON for API clients (a path under ``/api/``, or a request that accepts JSON and not HTML) and leave
browsers Django's own pages; and ends the API's routes with ``not_found``, which also sends a path
with a stray trailing slash (or a missing one) to the endpoint it meant.
"""

from urllib.parse import quote

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from apps.core.api.exceptions import body_too_large

API_PREFIX = "/api/"


def wants_json(request: HttpRequest) -> bool:
    if request.path.startswith(API_PREFIX):
        return True
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


def detail(status: int, message: str) -> JsonResponse:
    return JsonResponse({"detail": message}, status=status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not wants_json(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        too_large = body_too_large()
        return detail(too_large.status_code, str(too_large.detail))
    return detail(400, "Bad request.")


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not wants_json(request):
        return defaults.permission_denied(request, exception)
    return detail(403, "You do not have permission to perform this action.")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not wants_json(request):
        return defaults.page_not_found(request, exception)
    return detail(404, "Not found.")


def server_error(request: HttpRequest) -> HttpResponse:
    if not wants_json(request):
        return defaults.server_error(request)
    return detail(500, "The server failed to answer this request; the error is in its log.")


def _routes_elsewhere(path: str) -> bool:
    try:
        return resolve(path).func is not not_found
    except Resolver404:
        return False


@csrf_exempt  # it changes nothing: a write to no endpoint is told so, not refused for its CSRF token
def not_found(request: HttpRequest) -> HttpResponse:
    """The last route under /api/: the same path with or without its trailing slash, if that is an
    endpoint, is a permanent redirect keeping the method and body (308); anything else a JSON 404."""
    other = request.path.rstrip("/") if request.path.endswith("/") else f"{request.path}/"
    if _routes_elsewhere(other):
        query = request.META.get("QUERY_STRING", "")
        location = quote(other) + (f"?{query}" if query else "")
        response = detail(308, f"This endpoint is {other}.")
        response["Location"] = location
        return response
    return detail(404, f"No API endpoint at {request.path}; GET /api/v1/ lists them, /api/docs/ describes them.")
