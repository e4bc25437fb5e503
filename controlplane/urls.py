from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from apps.dashboard.urls import auth_urlpatterns
from apps.telemetry.metrics import MetricsView

api_v1 = [
    path("", include("apps.accounts.api.urls")),
    path("", include("apps.inventory.api.urls")),
    path("", include("apps.costs.api.urls")),
    path("", include("apps.failures.api.urls")),
    path("", include("apps.telemetry.api.urls")),
    path("", include("apps.gateway.api.urls")),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    *auth_urlpatterns,
    path("", include("apps.dashboard.urls")),
]
