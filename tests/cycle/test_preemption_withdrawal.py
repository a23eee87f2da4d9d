"""A preemption whose preemptor lands elsewhere is withdrawn before the victim stops: the real
cycle, the cluster sync and the simulated cluster on real PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.cluster.simulated import SimulatedBackend
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, JobEvent, SimulatedWorkload

LONG = {"gpuqueue.dev/sim-duration-seconds": "36000"}


@pytest.fixture(autouse=True)
def no_minimum_runtime(settings: Any) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0


@pytest.fixture
def slow_saves(cluster_file: Path) -> SimulatedBackend:
    """Workloads take 5 minutes to save a checkpoint (their grace is 120 s)."""
    return SimulatedBackend(cluster_file, startup_seconds=0, checkpoint_seconds=300)


def test_a_preemption_whose_preemptor_lands_elsewhere_is_withdrawn(
    world: Any, submit: Any, slow_saves: SimulatedBackend
) -> None:
    sync_cluster(slow_saves)
    grab = [submit(gpus_per_worker=8, annotations=LONG) for _ in range(4)]  # all 32 H100
    for _ in range(3):
        run_cycle(backend=slow_saves)
        sync_cluster(slow_saves)
    assert {Job.objects.get(pk=j.pk).state for j in grab} == {JobState.RUNNING}

    b_job = submit(user=world.carol, team=world.team_b, gpus_per_worker=8, annotations=LONG)
    result = run_cycle(backend=slow_saves)
    assert len(result.preempted) == 1
    victim = Job.objects.get(pk=result.preempted[0])
    assert SimulatedWorkload.objects.get(job_id=victim.pk).checkpoint_requested_at is not None

    # Another of team a's jobs ends meanwhile: team b's job starts on the GPUs it leaves.
    other = next(j for j in grab if j.pk != victim.pk)
    SimulatedWorkload.objects.filter(job_id=other.pk).update(
        ends_at=timezone.now() - timedelta(seconds=1)
    )
    sync_cluster(slow_saves)
    result = run_cycle(backend=slow_saves)
    b_job.refresh_from_db()
    assert b_job.state == JobState.ADMITTED
    assert b_job.placement == Job.objects.get(pk=other.pk).placement

    # Nobody needs the victim's GPUs: it goes on, and is no longer asked to save.
    assert result.withdrawn == [victim.pk]
    victim.refresh_from_db()
    assert victim.state == JobState.RUNNING
    assert victim.checkpoint_requested_at is None and victim.checkpoint_deadline is None
    event = JobEvent.objects.filter(job=victim).order_by("at", "id").last()
    assert (event.from_state, event.to_state) == (JobState.PREEMPTING, JobState.RUNNING)
    assert event.details == {"withdrawn": True}
    workload = SimulatedWorkload.objects.get(job_id=victim.pk)
    assert workload.checkpoint_requested_at is None and workload.checkpoint_deadline is None

    # Past what would have been its deadline, it still runs.
    later = timezone.now() + timedelta(seconds=400)
    sync_cluster(slow_saves, now=later)
    run_cycle(now=later, backend=slow_saves)
    victim.refresh_from_db()
    assert victim.state == JobState.RUNNING
