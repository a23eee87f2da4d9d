"""Turn admitted jobs into backend calls, after the admission has been committed."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from gpuqueue.cluster import get_backend
from gpuqueue.cluster.base import ClusterBackend, ClusterError, LaunchSpec
from gpuqueue.models import Job
from gpuqueue.services.transitions import transition
from gpuqueue.states import JobState

log = logging.getLogger(__name__)


def launch_spec(job: Job) -> LaunchSpec:
    env = {str(k): str(v) for k, v in job.env.items()}
    if job.attempts > 1:
        # A requeued job resumes: tell it which attempt this is and where it saved.
        env.update(
            GPUQUEUE_RESUME="1",
            GPUQUEUE_ATTEMPT=str(job.attempts),
            GPUQUEUE_CHECKPOINT=job.checkpoint_location,
        )
    return LaunchSpec(
        job_id=job.pk,
        attempt=job.attempts,
        team=job.team.slug,
        namespace=job.team.namespace,
        name=job.name,
        image=job.image,
        command=list(job.command),
        env=env,
        labels={str(k): str(v) for k, v in job.labels.items()},
        annotations={str(k): str(v) for k, v in job.annotations.items()},
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        resource_name=job.flavor.resource_name,
        placement={str(k): int(v) for k, v in job.placement.items()},
        checkpoint_grace_seconds=job.checkpoint_grace_seconds,
        max_runtime_seconds=job.max_runtime_seconds,
        checkpoint_location=job.checkpoint_location,
        tolerations=tuple(
            {str(k): str(v) for k, v in toleration.items()} for toleration in job.flavor.tolerations
        ),
    )


def launch_admitted(job_ids: list[int], backend: ClusterBackend | None = None) -> None:
    """Launch each admitted job; a transient failure leaves it ADMITTED for the next sync to
    retry, a permanent one (the cluster refused the manifest) fails the job with the message."""
    backend = backend or get_backend()
    jobs = Job.objects.select_related("team", "flavor").filter(
        pk__in=job_ids, state=JobState.ADMITTED
    )
    for job in jobs:
        try:
            backend.launch(launch_spec(job))
        except ClusterError as exc:
            if exc.transient:
                log.warning("launch of job %s deferred: %s", job.pk, exc)
                continue
            with transaction.atomic():
                transition(
                    job,
                    JobState.FAILED,
                    reason=f"the cluster refused the job: {exc}",
                    actor="cluster",
                    message=str(exc),
                    finished_at=timezone.now(),
                )
