"""Jobs whose pods could not be started back off, then fail at the cap
(gpuqueue/services/jobs/start_failures.py), and the admission cycle leaves them alone meanwhile."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.cycle.snapshot import load_snapshot
from gpuqueue.models import Job, JobEvent
from gpuqueue.services.jobs.start_failures import requeue_after_start_failure, start_backoff_seconds

CAUSE = "pods refused: exceeded quota: gpu-quota, requested: nvidia.com/gpu=8"
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def admitted(job: Job) -> Job:
    """The job as the cycle leaves it when it admits it: ADMITTED on a node, one launch more."""
    Job.objects.filter(pk=job.pk).update(
        state=JobState.ADMITTED, placement={"h100-0": 1}, admitted_at=T0, attempts=job.attempts + 1
    )
    job.refresh_from_db()
    return job


def fail_start(job: Job, now: datetime = T0, cause: str = CAUSE) -> bool:
    with transaction.atomic():
        return requeue_after_start_failure(job, cause, now)


def last_event(job: Job) -> JobEvent:
    return JobEvent.objects.filter(job=job).order_by("at", "id").last()


@pytest.mark.parametrize(
    ("first", "waits"),
    [
        (30, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]),
        (1000, [1000, 2000, 3600, 3600]),
        (0, [0, 0, 0]),
    ],
    ids=[
        "the first wait is the setting and each failure doubles it up to an hour",
        "a long first wait reaches the hour sooner",
        "no first wait means no wait at all",
    ],
)
def test_the_backoff_doubles_and_is_capped_at_an_hour(
    settings: Any, first: int, waits: list[int]
) -> None:
    settings.GPUQUEUE_START_BACKOFF_SECONDS = first
    assert [start_backoff_seconds(n) for n in range(1, len(waits) + 1)] == waits
    assert start_backoff_seconds(10_000) == (3600 if first else 0)  # no float overflow


def test_a_failed_start_requeues_in_place_with_a_doubling_wait(
    world: Any, submit: Any, settings: Any
) -> None:
    settings.GPUQUEUE_MAX_START_ATTEMPTS = 5
    settings.GPUQUEUE_START_BACKOFF_SECONDS = 30
    job = submit()
    submitted_at = job.submitted_at

    waits = []
    for failures in range(1, 5):
        job = admitted(job)
        assert fail_start(job, T0)
        job.refresh_from_db()
        assert job.state == JobState.PENDING and job.start_failures == failures
        waits.append((job.not_before - T0).total_seconds())
        assert job.attempts == failures  # launches so far: the requeue keeps the count
        assert job.submitted_at == submitted_at  # its place in line
        assert job.placement == {} and job.admitted_at is None

    assert waits == [30, 60, 120, 240]
    event = last_event(job)
    assert (event.from_state, event.to_state, event.actor) == ("ADMITTED", "PENDING", "cluster")
    assert event.reason == f"{CAUSE}; retrying in 240 s (start attempt 4 of 5)"
    assert job.message == event.reason
    assert job.pending_reason["code"] == "backing_off"
    assert job.pending_reason["numbers"]["until"] == (T0 + timedelta(seconds=240)).timestamp()


def test_the_last_allowed_failure_fails_the_job_with_the_cause(
    world: Any, submit: Any, settings: Any
) -> None:
    settings.GPUQUEUE_MAX_START_ATTEMPTS = 3
    job = submit()
    for _ in range(2):
        assert fail_start(admitted(job))
    job = admitted(job)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)  # part of the gang came up
    job.refresh_from_db()
    assert fail_start(job, cause="gang never ready: worker 1 unschedulable")

    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.finished_at == T0
    assert job.message == "gang never ready: worker 1 unschedulable"
    assert job.start_failures == 3 and job.not_before is None
    event = last_event(job)
    assert (event.from_state, event.to_state) == ("RUNNING", "FAILED")
    assert event.reason == "failed to start 3 times: gang never ready: worker 1 unschedulable"


def test_a_job_that_moved_meanwhile_is_left_alone(world: Any, submit: Any) -> None:
    job = admitted(submit())
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED, finished_at=T0)
    assert fail_start(job) is False
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.start_failures == 0


def test_a_backing_off_job_is_not_admitted_until_its_time(
    world: Any, submit: Any, backend: Any, settings: Any
) -> None:
    settings.GPUQUEUE_START_BACKOFF_SECONDS = 30
    sync_cluster(backend)
    job = submit(workers=2, gpus_per_worker=8)
    now = timezone.now()
    assert run_cycle(now=now, backend=backend).admitted == [job.pk]
    job.refresh_from_db()
    backend.stop(job.pk, job.attempts)  # the refused pods are gone
    assert fail_start(job, now)

    for later in (1, 29):
        result = run_cycle(now=now + timedelta(seconds=later), backend=backend)
        assert result.admitted == [] and result.pending == 0
        job.refresh_from_db()
        assert job.state == JobState.PENDING and job.pending_reason["code"] == "backing_off"

    assert run_cycle(now=now + timedelta(seconds=30), backend=backend).admitted == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.attempts == 2 and job.start_failures == 1


def test_a_backing_off_job_gets_the_engine_reason_once_its_time_comes(
    world: Any, submit: Any, backend: Any, settings: Any
) -> None:
    """Its time came but nothing is free: the cycle replaces the backoff with why it waits."""
    sync_cluster(backend)
    blocker = submit(user=world.carol, team=world.team_b, workers=4, gpus_per_worker=8)
    job = admitted(submit())
    now = timezone.now()
    assert fail_start(job, now)
    assert run_cycle(now=now, backend=backend).admitted == [blocker.pk]
    job.refresh_from_db()
    assert job.pending_reason["code"] == "backing_off"

    run_cycle(now=now + timedelta(hours=1), backend=backend)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.pending_reason["code"] != "backing_off"
    assert job.queue_position is not None


@pytest.mark.django_db(transaction=True)
def test_the_kept_pending_rows_leave_out_a_backing_off_job_until_its_time(
    world: Any, submit: Any
) -> None:
    """With rows kept between loads (committed, unchanged): the job is left out while it
    backs off and read when its time comes, the same with the kept rows on and off."""
    from django.test.utils import override_settings

    waiting, other = submit(), submit()
    now = timezone.now()
    fail_start(admitted(waiting), now)
    load_snapshot(now)  # keep what can be kept

    def pending_at(seconds: float) -> list[int]:
        at = now + timedelta(seconds=seconds)
        kept = [job.id for job in load_snapshot(at).pending]
        with override_settings(GPUQUEUE_CACHES=False):  # read whole
            assert [job.id for job in load_snapshot(at).pending] == kept
        return kept

    assert pending_at(0) == [other.pk]
    assert pending_at(29.9) == [other.pk]
    assert pending_at(30) == [waiting.pk, other.pk]
    assert pending_at(29.9) == [other.pk]  # a clock that steps back leaves it out again


def test_the_reason_says_until_when_it_backs_off() -> None:
    until = datetime(2030, 1, 1, 12, 1, 30, tzinfo=UTC).timestamp()
    reason = {
        "code": "backing_off",
        "numbers": {
            "until": until,
            "wait_seconds": 60,
            "start_failures": 2,
            "max_start_attempts": 5,
            "cause": "pods refused: exceeded quota",
        },
        "job_ids": [],
    }
    assert describe_reason(reason) == (
        "Backing off: 2 of 5 allowed start attempts failed (pods refused: exceeded quota); "
        "not considered for admission before 2030-01-01 12:01:30 UTC."
    )
