from django.urls import path
from rest_framework.routers import DefaultRouter

from gpuqueue.api.checkpoint_views import CheckpointedView
from gpuqueue.api.viewsets import JobViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")

urlpatterns = [
    # The workload's checkpoint acknowledgement: job token only (gpuqueue/api/checkpoint_views.py).
    path("jobs/<int:pk>/checkpointed/", CheckpointedView.as_view(), name="job-checkpointed"),
    *router.urls,
]
