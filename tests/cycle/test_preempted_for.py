"""Whom a preemption is for lives on the victim's row, written with its move to PREEMPTING and
cleared when it leaves: the cycle's snapshot reads it with the job, without the events, and a
job PREEMPTING when the column came (migration 0022) got it from its events."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpuqueue.cluster.simulated import SimulatedBackend
from gpuqueue.core.states import CHECKPOINT_ACKNOWLEDGED, JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.cycle.snapshot import load_snapshot
from gpuqueue.models import Job, JobEvent

LONG = {"gpuqueue.dev/sim-duration-seconds": "36000"}
BEFORE = ("gpuqueue", "0021_job_feed_trigger_by_column")


@pytest.fixture
def slow_saves(cluster_file: Path, settings: Any) -> SimulatedBackend:
    """Workloads take 5 minutes to save a checkpoint (their grace is 120 s)."""
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    return SimulatedBackend(cluster_file, startup_seconds=0, checkpoint_seconds=300)


def test_the_snapshot_knows_whom_a_victim_is_for_without_reading_events(
    world: Any, submit: Any, slow_saves: SimulatedBackend
) -> None:
    sync_cluster(slow_saves)
    grab = [submit(gpus_per_worker=8, annotations=LONG) for _ in range(4)]  # all 32 H100
    for _ in range(3):
        run_cycle(backend=slow_saves)
        sync_cluster(slow_saves)
    assert {Job.objects.get(pk=j.pk).state for j in grab} == {JobState.RUNNING}
    b_job = submit(user=world.carol, team=world.team_b, gpus_per_worker=8, annotations=LONG)
    (victim,) = run_cycle(backend=slow_saves).preempted
    assert Job.objects.get(pk=victim).preempted_for == b_job.pk

    events = JobEvent._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        snapshot = load_snapshot(timezone.now())
    assert not [q["sql"] for q in queries.captured_queries if events in q["sql"]]
    by_id = {job.id: job for job in snapshot.running}
    assert by_id[victim].preempting_since is not None
    assert by_id[victim].preempted_for == b_job.pk
    assert {job.preempted_for for job in snapshot.running if job.id != victim} == {None}

    # Its deadline passes: requeued, it is preempted for no one any more.
    sync_cluster(slow_saves, now=timezone.now() + timedelta(seconds=121))
    requeued = Job.objects.get(pk=victim)
    assert requeued.state == JobState.PENDING and requeued.preempted_for is None


@pytest.mark.django_db(transaction=True)
def test_an_upgrade_in_the_middle_of_a_preemption_keeps_whom_it_is_for(
    world: Any, submit: Any
) -> None:
    """Migration 0022 fills the column for jobs PREEMPTING at the time from their last move
    into PREEMPTING: the promise of their GPUs holds across the upgrade."""
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("gpuqueue")
    preempted, drained, ran_again = submit(), submit(), submit()
    Job.objects.filter(pk__in=[preempted.pk, drained.pk]).update(state=JobState.PREEMPTING)
    Job.objects.filter(pk=ran_again.pk).update(state=JobState.RUNNING)
    now = timezone.now()

    def event(job: Job, before: str, after: str, minutes: int, **details: Any) -> None:
        made = JobEvent.objects.create(
            job=job, from_state=before, to_state=after, reason="r", actor="cycle", details=details
        )
        JobEvent.objects.filter(pk=made.pk).update(at=now - timedelta(minutes=minutes))

    # An earlier preemption (withdrawn), then the current one, then its acknowledgement.
    event(preempted, "RUNNING", "PREEMPTING", 30, for_job=7)
    event(preempted, "PREEMPTING", "RUNNING", 25, withdrawn=True)
    event(preempted, "RUNNING", "PREEMPTING", 10, for_job=9)
    event(preempted, "PREEMPTING", "PREEMPTING", 5, event=CHECKPOINT_ACKNOWLEDGED)
    event(drained, "RUNNING", "PREEMPTING", 10, drain="n1")  # for no job
    event(ran_again, "RUNNING", "PREEMPTING", 30, for_job=7)
    event(ran_again, "PREEMPTING", "RUNNING", 25, withdrawn=True)
    try:
        MigrationExecutor(connection).migrate([BEFORE])  # the column goes, the rows stay
    finally:
        MigrationExecutor(connection).migrate(latest)

    found = dict(Job.objects.values_list("pk", "preempted_for"))
    assert found == {preempted.pk: 9, drained.pk: None, ran_again.pk: None}
