from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.costs.api import views

router = SimpleRouter(trailing_slash=False)
router.register("gpu-prices", views.GpuPriceViewSet)
router.register("energy-prices", views.EnergyPriceViewSet)

urlpatterns = [
    path("costs/gpu-hour", views.GpuHourCostView.as_view(), name="cost-gpu-hour"),
    path("costs/energy-hour", views.EnergyHourCostView.as_view(), name="cost-energy-hour"),
    path("costs/clusters/<int:pk>/rate", views.ClusterCostRateView.as_view(), name="cost-cluster-rate"),
    *router.urls,
]
