from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.inventory.api import views
from apps.inventory.api.import_view import InventoryImportView

router = SimpleRouter(trailing_slash=False)
router.register("clusters", views.ClusterViewSet)
router.register("node-types", views.NodeTypeViewSet)
router.register("port-templates", views.PortTemplateViewSet)
router.register("racks", views.RackViewSet)
router.register("nodes", views.NodeViewSet)
router.register("node-transitions", views.NodeTransitionViewSet)
router.register("gpus", views.GpuViewSet)
router.register("network-ports", views.NetworkPortViewSet)
router.register("fabrics", views.FabricViewSet)
router.register("switches", views.SwitchViewSet)
router.register("switch-ports", views.SwitchPortViewSet)
router.register("links", views.LinkViewSet)
router.register("nvlinks", views.NvLinkViewSet)

urlpatterns = [
    path("fabric/theoretical-busbw", views.BusBandwidthView.as_view(), name="theoretical-busbw"),
    path("inventory/import", InventoryImportView.as_view(), name="inventory-import"),
    *router.urls,
]
