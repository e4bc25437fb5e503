"""ASGI entry points: Django for HTTP, Channels for WebSockets, and the lifespan that starts and shuts
down what the process holds (controlplane/lifespan.py).

- ``application`` answers everything: pages, the REST API, the admin, the browsers' sockets and the
  node agents' (``/ws/agent``). One process of it is a whole control plane.
- ``agent_gateway`` answers the agents' sockets only, and starts only what they need. Run it in
  processes of its own, with ``/ws/agent`` routed to them (``AGENT_WS_URL``, README "Running in
  production"): a thousand agents' telemetry keeps an event loop busy, and a page served from that
  loop waits its turn behind them at every step (benchmarks/dashboard.py measured 0.1-0.7 s of each
  fleet page's time so). Anything else reaching it is refused: a 404, a socket closed at once.

Browser WebSocket routes are wrapped in the origin check and the session authentication; each
consumer refuses unauthenticated or unauthorised clients on connect and checks again on every
message. Node agents' routes are not: an agent sends no Origin header, which the origin check
refuses unless ALLOWED_HOSTS is "*", and it does not use cookies, which are what the origin check
protects. The agent consumer authenticates the node credential in the Authorization header
itself, which a browser cannot set on a WebSocket.
"""

import os
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

from controlplane.http import get_asgi_application

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator, WebsocketDenier  # noqa: E402
from django.urls import get_resolver, re_path  # noqa: E402

from agents.gc_tuning import freeze_startup_objects  # noqa: E402
from apps.core.process import Serves  # noqa: E402
from apps.dashboard.warm import warm_pages  # noqa: E402
from controlplane.lifespan import lifespan, lifespan_of  # noqa: E402
from controlplane.routing import agent_websocket_urlpatterns, websocket_urlpatterns  # noqa: E402

# The URLconf (the REST API, its schema, the admin) is imported at the first HTTP request otherwise:
# half a second that the first page after a restart would wait, behind 1,000 agents reconnecting.
get_resolver().url_patterns  # noqa: B018  (loading it is the point)
warm_pages()  # and the pages' templates and URL names, for the same first page

browser_websockets = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter([*agent_websocket_urlpatterns, re_path(r"", browser_websockets)]),
        "lifespan": lifespan,
    }
)

GATEWAY_ONLY = b"This is the control plane's agent gateway: it serves node agents' /ws/agent only.\n"


async def gateway_http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Any HTTP request to the agent gateway: pages, the API and enrollment are the application's."""
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(GATEWAY_ONLY)).encode())]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": GATEWAY_ONLY})


agent_gateway = ProtocolTypeRouter(
    {
        "http": gateway_http,
        "websocket": URLRouter([*agent_websocket_urlpatterns, re_path(r"", WebsocketDenier.as_asgi())]),
        "lifespan": lifespan_of(Serves.AGENTS),
    }
)

freeze_startup_objects()  # agents/gc_tuning.py says why
