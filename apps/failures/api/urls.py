from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.failures.api import views

router = SimpleRouter(trailing_slash=False)
router.register("failures", views.FailureViewSet)
router.register("stragglers", views.StragglerFlagViewSet)

urlpatterns = [
    # Before the router's routes, which would take "reliability" for a failure's id.
    path("failures/reliability", views.ReliabilityView.as_view(), name="failure-reliability"),
    path("xid-catalog", views.XidCatalogView.as_view(), name="xid-catalog"),
    path("xid-catalog/<int:code>", views.XidEntryView.as_view(), name="xid-entry"),
    *router.urls,
]
