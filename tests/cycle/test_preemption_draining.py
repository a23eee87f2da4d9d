"""A preemption takes what it needs and no more: while the victim's pods terminate, their GPUs
come back to the job they were taken for. The real cycle, the cluster sync and the simulated
cluster (whose stopped pods take 60 s to go) on real PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.cluster.simulated import SimulatedBackend
from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, JobEvent, Node

LONG = {"gpuqueue.dev/sim-duration-seconds": "36000"}
TERMINATION_SECONDS = 60


class Clock:
    """The time the backend, the sync and the cycle all go by: the real time, moved on by
    the test (the requeue's event is stamped with the real one)."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return timezone.now() + self.offset


@pytest.fixture(autouse=True)
def no_minimum_runtime(settings: Any) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def slow_pods(cluster_file: Path, clock: Clock) -> SimulatedBackend:
    return SimulatedBackend(
        cluster_file,
        startup_seconds=0,
        checkpoint_seconds=0,
        clock=clock,
        termination_seconds=TERMINATION_SECONDS,
    )


def one_pass(backend: SimulatedBackend, clock: Clock) -> None:
    run_cycle(now=clock(), backend=backend)
    sync_cluster(backend, now=clock())


def preempted_jobs() -> set[int]:
    return set(
        JobEvent.objects.filter(to_state=JobState.PREEMPTING)
        .exclude(from_state=JobState.PREEMPTING)
        .values_list("job_id", flat=True)
    )


def test_a_preemption_whose_victim_terminates_for_60_s_takes_exactly_one_victim(
    world: Any, submit: Any, slow_pods: SimulatedBackend, clock: Clock
) -> None:
    sync_cluster(slow_pods, now=clock())
    grab = [submit(gpus_per_worker=8, annotations=LONG) for _ in range(4)]  # all 32 H100
    for _ in range(3):
        one_pass(slow_pods, clock)
    assert {Job.objects.get(pk=j.pk).state for j in grab} == {JobState.RUNNING}

    # Team b, under its guarantee of 8, asks for 8: one of team a's jobs is preempted.
    b_job = submit(user=world.carol, team=world.team_b, gpus_per_worker=8, annotations=LONG)
    result = run_cycle(now=clock(), backend=slow_pods)
    assert len(result.preempted) == 1
    victim = Job.objects.get(pk=result.preempted[0])
    node = next(iter(victim.placement))

    # The checkpoint is acknowledged, the victim requeued and stopped: its pods terminate.
    sync_cluster(slow_pods, now=clock())
    sync_cluster(slow_pods, now=clock())
    victim.refresh_from_db()
    assert victim.state == JobState.PENDING
    stored = Node.objects.get(name=node)
    assert stored.draining == {str(victim.pk): {"nvidia.com/gpu": 8}}
    assert stored.used_externally == {}

    # For as long as they do, team b's job waits for those GPUs and nothing else is taken.
    for seconds in (1, 20, 40, 59):
        clock.offset = timedelta(seconds=seconds)
        one_pass(slow_pods, clock)
        b_job.refresh_from_db()
        assert b_job.state == JobState.PENDING
        assert b_job.pending_reason["code"] == "waiting_for_preemption", b_job.pending_reason
        assert b_job.pending_reason["job_ids"] == [victim.pk]
        assert preempted_jobs() == {victim.pk}
    assert describe_reason(b_job.pending_reason) == (
        f"Freeing 8 h100 GPUs from team-a's job #{victim.pk}, whose pods are stopping; then "
        "this job starts as 1 × 8."
    )

    # The pods are gone: team b's job starts on the node they left.
    clock.offset = timedelta(seconds=TERMINATION_SECONDS + 1)
    sync_cluster(slow_pods, now=clock())
    one_pass(slow_pods, clock)
    b_job.refresh_from_db()
    assert b_job.state in (JobState.ADMITTED, JobState.RUNNING)
    assert b_job.placement == {node: 1}
    assert preempted_jobs() == {victim.pk}
