"""A requeued job reaches the engine with when it was requeued (a gang's patience for one
domain of its preferred topology level counts from there), and keeps its submission time."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.cycle.snapshot import load_snapshot
from gpuqueue.models import Job
from gpuqueue.services.jobs.checkpoint import requeue


def test_a_requeued_job_reaches_the_engine_with_its_requeue_time(world: Any, submit: Any) -> None:
    fresh = submit(workers=2, gpus_per_worker=8)
    preempted = submit(workers=2, gpus_per_worker=8)
    Job.objects.filter(pk=preempted.pk).update(
        state=JobState.RUNNING, admitted_at=timezone.now(), placement={"n1": 1, "n2": 1}
    )
    preempted.refresh_from_db()
    assert requeue(preempted, "preempted")
    preempted.refresh_from_db()
    assert preempted.state == JobState.PENDING and preempted.requeued_at is not None

    jobs = {j.id: j for j in load_snapshot(timezone.now()).pending}
    assert jobs[fresh.pk].requeued_at is None
    assert jobs[preempted.pk].requeued_at == preempted.requeued_at.timestamp()
    assert jobs[preempted.pk].submitted_at == preempted.submitted_at.timestamp()
