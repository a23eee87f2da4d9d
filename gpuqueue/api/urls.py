from rest_framework.routers import DefaultRouter

from gpuqueue.api.viewsets import JobViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")

urlpatterns = router.urls
