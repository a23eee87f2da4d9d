"""Jobs whose pods could not be started: requeued with exponential backoff, failed at the cap.

A start failure is the cluster refusing or never running an admitted gang (a ResourceQuota
refused its pods, the gang never became ready, its planned nodes were taken, its image could not
be pulled). Retrying at once would usually fail the same way and hold GPUs the plan gave it, so
the job waits `GPUQUEUE_START_BACKOFF_SECONDS`, doubled after each further failure up to
MAX_BACKOFF_SECONDS, and after `GPUQUEUE_MAX_START_ATTEMPTS` failures in a row it ends FAILED
with the cause. The count is of consecutive failures: a start that ran (every worker running)
resets it (cycle/cluster_sync.py), and a preemption, a lost node or a gang held while a
victim's pods terminate never counts.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from gpuqueue.core.reason_text import BACKING_OFF
from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.jobs.checkpoint import requeue
from gpuqueue.services.jobs.pending import update_pending_rows
from gpuqueue.services.jobs.transitions import transition

MAX_BACKOFF_SECONDS = 3600.0


def start_backoff_seconds(failures: int) -> float:
    """The wait after the `failures`-th failed start (1 for the first): the configured first
    wait, doubled each time, at most MAX_BACKOFF_SECONDS."""
    first = settings.GPUQUEUE_START_BACKOFF_SECONDS
    # Capped before doubling too far: 2 ** 1100 would overflow a float.
    return min(first * 2 ** min(failures - 1, 64), MAX_BACKOFF_SECONDS)


def requeue_after_start_failure(
    job: Job, cause: str, now: datetime, actor: str = "cluster"
) -> bool:
    """Record a failed start of `job` (ADMITTED, or RUNNING when part of the gang never came
    up), inside the caller's transaction:

    1. count it (`start_failures` + 1);
    2. below GPUQUEUE_MAX_START_ATTEMPTS, requeue the job as `checkpoint.requeue` does (its
       place in line and checkpoint kept) with `not_before` = now + the backoff, and a pending
       reason that says until when it backs off;
    3. at the cap, fail it with `message` = the cause.

    The reason of the event names the cause and the wait. Returns False, changing nothing,
    when the job moved since it was read (as `transition` does). The caller stops the
    workload after commit, as for any requeue.
    """
    failures = job.start_failures + 1
    cap = settings.GPUQUEUE_MAX_START_ATTEMPTS
    with transaction.atomic(savepoint=False):
        if failures >= cap:
            return transition(
                job,
                JobState.FAILED,
                reason=f"failed to start {failures} times: {cause}",
                actor=actor,
                details={"cause": cause, "start_failures": failures, "attempt": job.attempts},
                message=cause,
                finished_at=now,
                start_failures=failures,
                not_before=None,
            )
        wait = start_backoff_seconds(failures)
        not_before = now + timedelta(seconds=wait)
        moved = requeue(
            job,
            f"{cause}; retrying in {wait:g} s (start attempt {failures} of {cap})",
            actor,
            start_failures=failures,
            not_before=not_before,
            estimated_start=None,
        )
        if moved:
            reason = {
                "code": BACKING_OFF,
                "numbers": {
                    "until": not_before.timestamp(),
                    "wait_seconds": wait,
                    "start_failures": failures,
                    "max_start_attempts": cap,
                    "cause": cause,
                },
                "job_ids": [],
            }
            update_pending_rows([(job.pk, reason, None, None)])
            job.standing_written()
        return moved
