"""Turn admitted jobs into backend calls, after the admission has been committed."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from gpuqueue.cluster import get_backend
from gpuqueue.cluster.base import ClusterBackend, ClusterError, LaunchSpec
from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.transitions import transition
from teams.services import hash_secret

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
        cpu_millicores=(
            job.flavor.cpu_millicores_per_gpu * job.gpus_per_worker
            if job.cpu_millicores is None
            else job.cpu_millicores
        ),
        memory_mib=(
            job.flavor.memory_mib_per_gpu * job.gpus_per_worker
            if job.memory_mib is None
            else job.memory_mib
        ),
        cpu_limit_millicores=job.cpu_limit_millicores or 0,
        memory_limit_mib=job.memory_limit_mib,
        shm_mib=job.shm_mib,
        volumes=tuple(
            {
                "claim": str(v["claim"]),
                "mount_path": str(v["mount_path"]),
                "read_only": bool(v.get("read_only")),
            }
            for v in job.volumes
        ),
        image_pull_secrets=tuple(str(name) for name in job.image_pull_secrets),
        env_from_secrets=tuple(str(name) for name in job.env_from_secrets),
        priority_class=job.priority_class,
        service_account=job.service_account,
    )


def launch_admitted(job_ids: list[int], backend: ClusterBackend | None = None) -> None:
    """Launch each admitted job.

    1. Read the jobs and build their launch specs (this thread: the database).
    2. Call the backend (`ClusterBackend.launch_all`: in bulk where it can, else up to its
       `launch_concurrency` at once).
    3. Keep the hash of each token the workloads were given, in one bulk update, so the API
       accepts it; fail each job whose manifest the cluster refused, or whose launch raised
       anything else, with the error. A transient failure leaves the job ADMITTED for the next
       sync to retry.
    """
    backend = backend or get_backend()
    # 1.
    jobs = list(
        Job.objects.select_related("team", "flavor").filter(
            pk__any=job_ids, state=JobState.ADMITTED
        )
    )
    specs = [launch_spec(job) for job in jobs]

    # 2.
    outcomes = backend.launch_all(specs)
    # 3.
    with_token = []
    for job, outcome in zip(jobs, outcomes, strict=True):
        run_as_user=job.flavor.run_as_user,
        run_as_group=job.flavor.run_as_group,
        fs_group=job.flavor.fs_group,
        allow_root=job.flavor.allow_root,
        if isinstance(outcome, str):
            job.checkpoint_token_hash = hash_secret(outcome)
            with_token.append(job)
        elif isinstance(outcome, ClusterError) and outcome.transient:
            log.warning("launch of job %s deferred: %s", job.pk, outcome)
        elif isinstance(outcome, Exception):
            # Refused by the cluster, or a launch that raised (a bug, a value out of range):
            # this job fails with the error, the others go on.
            if isinstance(outcome, ClusterError):
                cause = f"the cluster refused the job: {outcome}"
            else:
                log.error("launch of job %s failed", job.pk, exc_info=outcome)
                cause = f"launch failed: {type(outcome).__name__}: {outcome}"
            with transaction.atomic():
                transition(
                    job,
                    JobState.FAILED,
                    reason=cause,
                    actor="cluster",
                    message=str(outcome) if isinstance(outcome, ClusterError) else cause,
                    finished_at=timezone.now(),
                )
    Job.objects.bulk_update(with_token, ["checkpoint_token_hash"], batch_size=500)
