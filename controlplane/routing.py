"""WebSocket routes of every app, gathered in one place for the ASGI router.

Two kinds, because they authenticate differently (see asgi.py):

- ``agent_websocket_urlpatterns``: node agents. Each connection carries the node's credential in
  its Authorization header; agents send no Origin header and no cookie.
- ``websocket_urlpatterns``: browsers, authenticated by their session cookie, and so behind the
  Origin check that stops another site from opening a socket with that cookie.
"""

from django.urls import URLPattern, path

from apps.dashboard.consumers import LiveConsumer
from apps.gateway.consumers import AgentConsumer

agent_websocket_urlpatterns: list[URLPattern] = [
    path("ws/agent", AgentConsumer.as_asgi()),
]

websocket_urlpatterns: list[URLPattern] = [
    path("ws/live", LiveConsumer.as_asgi(), name="ws-live"),
]
