"""Reading a worker's log through the cluster backend, for the API and the dashboard.

Only the job's current (or last) attempt is read: earlier attempts' workloads are removed when
the job is requeued. Finished attempts stay readable for GPUQUEUE_K8S_KEEP_FINISHED_SECONDS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuqueue.cluster import get_backend
from gpuqueue.cluster.base import (
    ClusterBackend,
    ClusterError,
    LogNotFound,
    LogQuery,
    NoCredentials,
)
from gpuqueue.core.errors import Refused, Unavailable
from gpuqueue.models import Job

DEFAULT_TAIL = 100
MAX_TAIL = 10_000
# One answer carries at most this much: 10,000 long lines must not become a 100 MB response.
LIMIT_BYTES = 1024 * 1024
# What a client waits before asking again while the cluster cannot be reached.
RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True, slots=True)
class JobLog:
    job_id: int
    worker: int
    attempt: int
    lines: Sequence[str]
    truncated: bool


def worker_errors(job: Job, worker: int) -> list[str]:
    """What is wrong with asking `job` for worker `worker` (workers count from 0)."""
    if 0 <= worker < job.workers:
        return []
    plural = "s" if job.workers != 1 else ""
    return [f"Between 0 and {job.workers - 1}: the job has {job.workers} worker{plural}."]


def read_job_log(
    job: Job,
    worker: int,
    *,
    tail: int = DEFAULT_TAIL,
    since_seconds: int | None = None,
    backend: ClusterBackend | None = None,
) -> JobLog:
    """The last `tail` lines of worker `worker` of the job's current or last attempt.

    Refused (404) when the job never started or the cluster no longer has the worker; Refused
    (409) when the cluster has it but cannot give its log yet (a container still starting);
    Unavailable (503) when the cluster cannot be reached, or this process has no credentials
    to ask it with.
    """
    if errors := worker_errors(job, worker):
        raise Refused(errors[0], fields={"worker": errors})
    if job.attempts == 0:
        raise Refused(f"job {job.pk} has not started", status=404, code="not_started")
    query = LogQuery(tail_lines=tail, limit_bytes=LIMIT_BYTES, since_seconds=since_seconds)
    try:
        backend = backend or get_backend()
    except NoCredentials as exc:
        # A web pod without a Kubernetes token (or kubeconfig) to read logs with: the install's
        # fault, said as such; nothing a retry or the job's owner can change.
        raise Unavailable(
            "This gpuqueue web server has no Kubernetes credentials to read logs with "
            f"(its ServiceAccount token is not mounted: {exc}).",
            retry_after=RETRY_AFTER_SECONDS,
        ) from exc
    try:
        log = backend.read_log(job.pk, job.attempts, worker, query)
    except LogNotFound as exc:
        raise Refused(str(exc), status=404, code="not_found") from exc
    except ClusterError as exc:
        if exc.transient:
            raise Unavailable(
                f"The cluster cannot be reached now; try again in {RETRY_AFTER_SECONDS} s.",
                retry_after=RETRY_AFTER_SECONDS,
            ) from exc
        raise Refused(
            f"worker {worker} of job {job.pk} has no log yet: {exc}",
            status=409,
            code="no_log_yet",
        ) from exc
    return JobLog(job.pk, worker, job.attempts, tuple(log.lines), log.truncated)
