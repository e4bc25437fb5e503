from rest_framework.routers import SimpleRouter

from apps.jobs.api import views

router = SimpleRouter(trailing_slash=False)
router.register("runs", views.RunViewSet)
router.register("commands", views.CommandViewSet)

urlpatterns = router.urls
