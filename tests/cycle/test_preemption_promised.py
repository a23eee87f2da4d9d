"""A preemption takes what it needs and no more: while the victim saves its checkpoint, its GPUs
are promised to the job it was preempted for, and a job before that one in the order does not
claim them. The real cycle, the cluster sync and the simulated cluster on real PostgreSQL."""

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
from gpuqueue.models import Job, JobEvent, Quota
from teams.models import Team

LONG = {"gpuqueue.dev/sim-duration-seconds": "36000"}


@pytest.fixture
def slow_saves(cluster_file: Path) -> SimulatedBackend:
    """Workloads take 5 minutes to save a checkpoint (their grace is 120 s)."""
    return SimulatedBackend(cluster_file, startup_seconds=0, checkpoint_seconds=300)


def preempted_jobs() -> set[int]:
    return set(
        JobEvent.objects.filter(to_state=JobState.PREEMPTING)
        .exclude(from_state=JobState.PREEMPTING)
        .values_list("job_id", flat=True)
    )


def test_a_starving_job_does_not_take_the_gpus_of_a_victim_saving_for_another_job(
    world: Any, submit: Any, slow_saves: SimulatedBackend, settings: Any
) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 3600
    team_c = Team.objects.create(slug="team-c", name="Team C", namespace="team-c")
    Quota.objects.create(team=team_c, flavor=world.h100, guarantee=8, limit=32, weight=1)
    sync_cluster(slow_saves)
    grab = [submit(gpus_per_worker=8, annotations=LONG) for _ in range(4)]  # all 32 H100
    for _ in range(3):
        run_cycle(backend=slow_saves)
        sync_cluster(slow_saves)
    assert {Job.objects.get(pk=j.pk).state for j in grab} == {JobState.RUNNING}
    # One of them has run past its minimum runtime; the others may not be preempted yet.
    two_hours_ago = timezone.now() - timedelta(hours=2)
    Job.objects.filter(pk=grab[0].pk).update(admitted_at=two_hours_ago)

    # Team b, under its guarantee of 8, asks for 8: that job is preempted for it.
    b_job = submit(user=world.carol, team=world.team_b, gpus_per_worker=8, annotations=LONG)
    result = run_cycle(backend=slow_saves)
    assert result.preempted == [grab[0].pk]

    # While it saves, team c's job that has waited two hours (starving: decided before every
    # other job) asks for 8 GPUs.
    starving = submit(user=world.root, team=team_c, gpus_per_worker=8, annotations=LONG)
    Job.objects.filter(pk=starving.pk).update(submitted_at=two_hours_ago)
    sync_cluster(slow_saves)
    run_cycle(backend=slow_saves)
    assert Job.objects.get(pk=grab[0].pk).state == JobState.PREEMPTING

    # Team b's job still waits for its victim; the starving job does not claim its GPUs.
    b_job.refresh_from_db()
    assert b_job.pending_reason["code"] == "waiting_for_preemption", b_job.pending_reason
    assert b_job.pending_reason["job_ids"] == [grab[0].pk]
    starving.refresh_from_db()
    assert grab[0].pk not in (starving.pending_reason.get("job_ids") or []), starving.pending_reason
    assert preempted_jobs() == {grab[0].pk}
