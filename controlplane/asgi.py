"""ASGI entry point: Django for HTTP, Channels for WebSockets, and the lifespan that starts and shuts
down what the process holds (controlplane/lifespan.py).

Browser WebSocket routes are wrapped in the origin check and the session authentication; each
consumer refuses unauthenticated or unauthorised clients on connect and checks again on every
message. Node agents' routes are not: an agent sends no Origin header, which the origin check
refuses unless ALLOWED_HOSTS is "*", and it does not use cookies, which are what the origin check
protects. The agent consumer authenticates the node credential in the Authorization header
itself, which a browser cannot set on a WebSocket.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

from controlplane.http import get_asgi_application

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import get_resolver, re_path  # noqa: E402

from agents.gc_tuning import freeze_startup_objects  # noqa: E402
from apps.dashboard.warm import warm_pages  # noqa: E402
from controlplane.lifespan import lifespan  # noqa: E402
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

freeze_startup_objects()  # agents/gc_tuning.py says why
