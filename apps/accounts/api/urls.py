from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.accounts.api import views

router = SimpleRouter(trailing_slash=False)
router.register("users", views.UserViewSet)
router.register("tokens", views.ApiTokenViewSet)
router.register("audit-log", views.AuditLogViewSet)

urlpatterns = [path("me", views.MeView.as_view(), name="me"), *router.urls]
