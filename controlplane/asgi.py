"""ASGI entry point: Django for HTTP, Channels for WebSockets.

Browser WebSocket routes are wrapped in the origin check and the session authentication; each
consumer refuses unauthenticated or unauthorised clients on connect and checks again on every
message. Node agents' routes are not: an agent sends no Origin header, which the origin check
refuses unless ALLOWED_HOSTS is "*", and it does not use cookies, which are what the origin check
protects. The agent consumer authenticates the node credential in the Authorization header
itself, which a browser cannot set on a WebSocket.
"""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import get_resolver, re_path  # noqa: E402

from controlplane.routing import agent_websocket_urlpatterns, websocket_urlpatterns  # noqa: E402

# The URLconf (the REST API, its schema, the admin) is imported at the first HTTP request otherwise:
# half a second that the first page after a restart would wait, behind 1,000 agents reconnecting.
get_resolver().url_patterns  # noqa: B018  (loading it is the point)

browser_websockets = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter([*agent_websocket_urlpatterns, re_path(r"", browser_websockets)]),
    }
)

# Garbage collection for a process that ingests thousands of samples a second. CPython's defaults
# ran a full collection every few seconds at 1,000 nodes, each walking the ~220,000 objects of
# Django and its libraries (for nothing: they live as long as the process) and stopping the process
# for 100-500 ms: pages, snapshots and live updates all waited. Frozen, those objects are left out
# of every collection; and young objects are collected every 20,000 allocations instead of 700,
# since each sample's objects die young. (Measured with benchmarks/dashboard.py: the fleet page's
# first byte went from ~500 ms to ~150 ms under the 1,000-node load.)
GC_YOUNG_THRESHOLD = 20_000
gc.set_threshold(GC_YOUNG_THRESHOLD, 10, 10)
gc.freeze()
