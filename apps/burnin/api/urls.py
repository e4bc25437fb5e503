from rest_framework.routers import SimpleRouter

from apps.burnin.api import views

router = SimpleRouter(trailing_slash=False)
router.register("burn-ins", views.BurnInViewSet)
router.register("burn-in-nodes", views.BurnInNodeViewSet)
router.register("burn-in-checks", views.BurnInCheckViewSet)
router.register("burn-in-suites", views.SuiteViewSet)
router.register("burn-in-thresholds", views.ThresholdViewSet)
router.register("quarantine-breakers", views.BreakerViewSet)

urlpatterns = router.urls
