"""`POST /api/v1/jobs/{id}/checkpointed/`: a workload says where it saved its state. While the
job is being preempted that acknowledges the checkpoint request; while it runs it registers the
save (the newest wins), so that a requeue for any cause resumes from it.

The caller is the workload itself, not a person: it authenticates with the per-job token that
gpuqueue put in its Secret (`Authorization: Bearer gqj_…`, GPUQUEUE_JOB_TOKEN), valid for that
job alone. User sessions and user API tokens are not accepted here, and a job token is accepted
nowhere else.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework import authentication, exceptions, permissions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.jobs.checkpoint import (
    acknowledge_checkpoint,
    job_for_token,
    register_checkpoint,
)

ACTOR = "workload"


class JobTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gqj_<job>_<secret>`; `request.auth` is the job."""

    def authenticate(self, request: Any) -> tuple[Any, Job] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() != "bearer":
            return None
        if len(header) != 2 or not header[1].startswith("gqj_"):
            raise exceptions.AuthenticationFailed("A job token (gqj_…) is required.")
        job = job_for_token(header[1])
        if job is None:
            raise exceptions.AuthenticationFailed("Invalid job token.")
        return AnonymousUser(), job

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="gpuqueue-job"'


class IsThisJobsToken(permissions.BasePermission):
    def has_permission(self, request: Any, view: Any) -> bool:
        if not isinstance(request.auth, Job):
            raise exceptions.NotAuthenticated("A job token (gqj_…) is required.")
        # Another job's token is told nothing about this job, as for anything one may not see.
        if request.auth.pk != int(view.kwargs["pk"]):
            raise exceptions.NotFound("No such job.")
        return True


class CheckpointSerializer(serializers.Serializer):
    location = serializers.CharField(max_length=1024, allow_blank=False, trim_whitespace=True)


def _error(code: str, message: str, http_status: int) -> Response:
    # The API's one error shape (gpuqueue.api.errors), built here to stay independent of it.
    return Response({"error": {"code": code, "message": message}}, status=http_status)


class CheckpointedView(APIView):
    authentication_classes = [JobTokenAuthentication]
    permission_classes = [IsThisJobsToken]
    # Workers reach the API from a few node addresses (NAT): an anonymous per-address rate
    # would drop acknowledgements, and a valid job token can only acknowledge its own job.
    throttle_classes: list[Any] = []

    def post(self, request: Request, pk: int) -> Response:
        body = CheckpointSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        location = body.validated_data["location"]
        job: Job = request.auth
        # The watcher's next pass (every GPUQUEUE_SYNC_SECONDS) requeues the job and stops its
        # workload. No sync runs here or in a worker: a second process following the cluster
        # outside the watcher's lease would act on its own, older reading of it.
        if acknowledge_checkpoint(job, location, ACTOR):
            return Response({"job": job.pk, "acknowledged": True, "location": location})
        if register_checkpoint(job, location):
            return Response(
                {"job": job.pk, "acknowledged": False, "registered": True, "location": location}
            )
        job.refresh_from_db()
        # A retried acknowledgement (the first answer got lost) is the same success.
        if job.checkpoint_acked_at is not None and job.checkpoint_location == location:
            return Response({"job": job.pk, "acknowledged": True, "location": location})
        if job.state != JobState.PREEMPTING:
            return _error(
                "not_preempting",
                f"Job {job.pk} is {job.state}; it neither runs nor is being preempted.",
                status.HTTP_409_CONFLICT,
            )
        return _error(
            "already_acknowledged",
            f"Job {job.pk} already acknowledged a checkpoint at {job.checkpoint_location}.",
            status.HTTP_409_CONFLICT,
        )
