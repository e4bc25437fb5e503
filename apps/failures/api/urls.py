from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.failures.api import views

router = SimpleRouter(trailing_slash=False)
router.register("failures", views.FailureViewSet)
router.register("stragglers", views.StragglerFlagViewSet)

urlpatterns = [
    path("xid-catalog", views.XidCatalogView.as_view(), name="xid-catalog"),
    path("xid-catalog/<int:code>", views.XidEntryView.as_view(), name="xid-entry"),
    *router.urls,
]
