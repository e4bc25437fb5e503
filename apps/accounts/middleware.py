from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from apps.accounts.audit import record_request

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class AuditLogMiddleware:
    """Writes one audit row for every request that could change state, whatever its outcome (the
    repeats of an anonymous one share a row: apps/accounts/audit.py).

    It runs after the view, outside the view's transaction, so refused and failed attempts are
    kept as well (with their status code). DRF copies the user and token it authenticated onto the
    underlying request, which is how token-authenticated API calls get their actor.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.method not in SAFE_METHODS:
            record_request(request, response.status_code)
        return response
