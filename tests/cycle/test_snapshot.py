"""The engine's snapshot as read from the database, job by job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.test.utils import override_settings
from django.utils import timezone

from gpuqueue.models import Job
from gpuqueue.scheduler import model as m
from gpuqueue.snapshot import StoredPending, load_snapshot
from gpuqueue.states import JobState

REASON = {"code": "no_fit", "numbers": {"needed": 8, "free": 6}, "job_ids": []}


@override_settings(GPUQUEUE_MIN_RUNTIME_SECONDS=60)
def test_jobs_reach_the_engine_with_their_times_placements_and_stored_reasons(
    world: Any, submit: Any
) -> None:
    now = timezone.now()
    admitted_at = now - timedelta(minutes=5)
    checkpoint_at = now - timedelta(seconds=30)
    running = submit(priority=3, max_runtime_seconds=7200, workers=2, gpus_per_worker=4)
    preempting = submit(user=world.carol, team=world.team_b, preemptible=True)
    waiting = submit(workers=3, gpus_per_worker=2, expected_runtime_seconds=600, priority=-1)
    plain = submit(flavor=world.l4)
    Job.objects.filter(pk=running.pk).update(
        state=JobState.RUNNING, admitted_at=admitted_at, placement={"n2": 4, "n1": 4}
    )
    Job.objects.filter(pk=preempting.pk).update(
        state=JobState.PREEMPTING,
        admitted_at=admitted_at,
        placement={"n3": 1},
        checkpoint_requested_at=checkpoint_at,
    )
    Job.objects.filter(pk=waiting.pk).update(
        pending_reason=REASON, queue_position=2, cluster_position=5
    )
    Job.objects.create(  # finished jobs are not in the snapshot
        team=world.team_a,
        user=world.alice,
        flavor=world.h100,
        name="done",
        image="i",
        state=JobState.SUCCEEDED,
        finished_at=now,
    )

    stored: dict[int, StoredPending] = {}
    snapshot = load_snapshot(now, stored)

    started = admitted_at.timestamp()
    assert snapshot.now == now.timestamp()
    assert snapshot.running == (
        m.RunningJob(
            id=running.pk,
            team="team-a",
            user=str(world.alice.pk),
            flavor="h100",
            gpus_per_worker=4,
            placement=(("n1", 4), ("n2", 4)),
            priority=3,
            preemptible=True,
            started_at=started,
            max_runtime=7200,
            min_runtime_until=started + 60,
        ),
        m.RunningJob(
            id=preempting.pk,
            team="team-b",
            user=str(world.carol.pk),
            flavor="h100",
            gpus_per_worker=1,
            placement=(("n3", 1),),
            priority=0,
            preemptible=True,
            started_at=started,
            min_runtime_until=started + 60,
            preempting_since=checkpoint_at.timestamp(),
        ),
    )
    assert snapshot.pending == (
        m.PendingJob(
            id=waiting.pk,
            team="team-a",
            user=str(world.alice.pk),
            flavor="h100",
            workers=3,
            gpus_per_worker=2,
            priority=-1,
            preemptible=True,
            submitted_at=waiting.submitted_at.timestamp(),
            expected_runtime=600,
        ),
        m.PendingJob(
            id=plain.pk,
            team="team-a",
            user=str(world.alice.pk),
            flavor="l4",
            workers=1,
            gpus_per_worker=1,
            priority=0,
            preemptible=True,
            submitted_at=plain.submitted_at.timestamp(),
        ),
    )
    assert stored == {waiting.pk: (REASON, 2, 5), plain.pk: (None, None, None)}
    assert load_snapshot(now) == snapshot  # the same without asking for stored values
