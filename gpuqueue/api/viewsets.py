from __future__ import annotations

from typing import Any

from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from gpuqueue.api.serializers import JobSerializer
from gpuqueue.models import Job
from gpuqueue.services.cancel import cancel_job
from gpuqueue.services.submit import submit_job


class JobViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = JobSerializer
    ordering = "-submitted_at"

    def get_queryset(self) -> Any:
        return Job.objects.visible_to(self.request.user).select_related("team", "flavor", "user")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        team, flavor = data.pop("team"), data.pop("flavor")
        key = request.headers.get("Idempotency-Key") or None
        result = submit_job(request.user, team, flavor, data, idempotency_key=key)
        return Response(
            self.get_serializer(result.job).data,
            status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK,
        )

    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = cancel_job(request.user, self.get_object())
        return Response(self.get_serializer(job).data)
