from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.gateway.api import views

router = SimpleRouter(trailing_slash=False)
router.register("enrollment-tokens", views.EnrollmentTokenViewSet)
router.register("node-credentials", views.NodeCredentialViewSet)
router.register("agents", views.NodeAgentViewSet)
router.register("discovery-changes", views.DiscoveryChangeViewSet)
router.register("gateway-errors", views.GatewayCounterViewSet)

urlpatterns = [
    path("agents/enroll", views.EnrollView.as_view(), name="agent-enroll"),
    *router.urls,
]
