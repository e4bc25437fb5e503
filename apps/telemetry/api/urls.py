from django.urls import path

from apps.telemetry.api import views

urlpatterns = [
    path("nodes/<str:node>/telemetry", views.NodeTelemetryView.as_view(), name="node-telemetry"),
    path("telemetry/fleet", views.FleetHistoryView.as_view(), name="fleet-telemetry"),
]
