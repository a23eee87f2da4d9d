"""/api/v1/: one router for every resource (teams' resources included, under the same
prefix), plus the two plain views."""

from django.urls import path, re_path
from rest_framework.routers import DefaultRouter

from gpuqueue.api.array_views import ArrayViewSet
from gpuqueue.api.checkpoint_views import CheckpointedView
from gpuqueue.api.errors import api_not_found
from gpuqueue.api.usage_views import UsageView
from gpuqueue.api.viewsets import (
    FlavorViewSet,
    JobViewSet,
    MeView,
    NodeViewSet,
    QuotaViewSet,
    UtilizationHistoryViewSet,
    UtilizationView,
)
from teams.api.viewsets import AuditViewSet, MembershipViewSet, TeamViewSet, TokenViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("arrays", ArrayViewSet, basename="array")
router.register("teams", TeamViewSet, basename="team")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("flavors", FlavorViewSet, basename="flavor")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("nodes", NodeViewSet, basename="node")
router.register("utilization/history", UtilizationHistoryViewSet, basename="utilization-history")
router.register("tokens", TokenViewSet, basename="token")
router.register("audit", AuditViewSet, basename="audit")

urlpatterns = [
    path("me/", MeView.as_view(), name="me"),
    path("utilization/", UtilizationView.as_view(), name="utilization"),
    path("usage/", UsageView.as_view(), name="usage"),
    # The Kubernetes backend's checkpoint acknowledgement route (gpuqueue/api/checkpoint_views.py)
    # goes here, before the router.
    path("jobs/<int:pk>/checkpointed/", CheckpointedView.as_view(), name="job-checkpointed"),
    *router.urls,
    # Last: an unknown path under /api/v1/ answers in the error shape too.
    re_path(r"^", api_not_found),
]
