"""The start-attempt cap counts a job's own failed starts in a row: a start that ran resets the
count, so a long job requeued now and then never reaches the cap for that."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuqueue.cluster.base import Phase, WorkloadStatus
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import _follow, sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from gpuqueue.services.jobs.checkpoint import requeue
from gpuqueue.services.jobs.start_failures import requeue_after_start_failure


def test_a_start_that_ran_resets_the_count_of_failed_starts(
    submit: Any, backend: Any, settings: Any
) -> None:
    settings.GPUQUEUE_MAX_START_ATTEMPTS = 2
    settings.GPUQUEUE_START_BACKOFF_SECONDS = 0
    sync_cluster(backend)  # the inventory
    job = submit(workers=1, gpus_per_worker=8)
    now = datetime.now(UTC)
    for _ in range(6):  # admitted, one failed start, admitted, ran, preempted: six times
        run_cycle(backend=backend)
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED
        assert requeue_after_start_failure(job, "pods refused: quota", now)
        job.refresh_from_db()
        assert job.state == JobState.PENDING and job.start_failures == 1
        run_cycle(backend=backend)
        job.refresh_from_db()
        _follow(job, WorkloadStatus(job.pk, job.attempts, Phase.RUNNING, now), now)
        job.refresh_from_db()
        assert job.state == JobState.RUNNING and job.start_failures == 0
        assert requeue(Job.objects.get(pk=job.pk), "preempted; requeued")
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.attempts == 12
