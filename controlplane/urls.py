from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from apps.core.api import errors
from apps.core.api.metrics import MetricsView
from apps.core.api.root import ApiRootView
from apps.dashboard.urls import auth_urlpatterns

api_v1 = [
    path("", ApiRootView.as_view(), name="api-root"),
    path("", include("apps.accounts.api.urls")),
    path("", include("apps.inventory.api.urls")),
    path("", include("apps.costs.api.urls")),
    path("", include("apps.failures.api.urls")),
    path("", include("apps.telemetry.api.urls")),
    path("", include("apps.gateway.api.urls")),
    path("", include("apps.jobs.api.urls")),
    path("", include("apps.burnin.api.urls")),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script from a URL of its own (?script): the CSP allows no inline script.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="schema", template_name="api/swagger_ui.html"),
        name="api-docs",
    ),
    re_path(r"^api/", errors.not_found),  # after every API route: a JSON 404, or the route meant
    path("metrics", MetricsView.as_view(), name="metrics"),
    *auth_urlpatterns,
    path("", include("apps.dashboard.urls")),
]

# Errors outside DRF's views (a path no route matches, an oversize body, the 500) in JSON for API clients.
handler400 = errors.bad_request
handler403 = errors.permission_denied
handler404 = errors.page_not_found
handler500 = errors.server_error
