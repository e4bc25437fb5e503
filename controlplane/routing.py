"""WebSocket routes of every app, gathered in one place for the ASGI router."""

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
