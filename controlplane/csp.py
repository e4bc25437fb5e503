"""The Content-Security-Policy every response carries (CONTENT_SECURITY_POLICY in settings.py holds
the fixed part). Pages may load scripts, styles, images, fonts and workers from this origin only (and
images from data: URIs, which the API docs' stylesheet uses); no inline script, no inline style, no
eval, no plugins, no framing; forms post only here.

The one part that depends on the request is ``connect-src``: the pages' live streams open a WebSocket
to the host the page came from, which CSP's ``'self'`` covers in current browsers but not in every
browser that shipped it, so the socket's origin (``ws://`` or ``wss://`` with the page's host) is
named outright."""

from csp.middleware import CSPMiddleware, PolicyParts
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponseBase


def websocket_origin(request: HttpRequest) -> str | None:
    """``ws://host:port`` (``wss://`` over HTTPS) of the page's own host, or None for a host that is
    not allowed (the response is already a 400 then)."""
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return f"{'wss' if request.is_secure() else 'ws'}://{host}"


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    def get_policy_parts(
        self, request: HttpRequest, response: HttpResponseBase, report_only: bool = False
    ) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        origin = websocket_origin(request)
        if origin:
            update = dict(parts.update or {})
            update["connect-src"] = [*update.get("connect-src", ()), origin]
            parts.update = update
        return parts
