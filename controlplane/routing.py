"""WebSocket routes of every app, gathered in one place for the ASGI router."""

from django.urls import URLPattern, path

from apps.dashboard.consumers import LiveConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/live", LiveConsumer.as_asgi(), name="ws-live"),
]
