"""The cycle's one-statement write of reasons and positions on pending jobs."""

from __future__ import annotations

from typing import Any

from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.pending import update_pending_rows

REASON = {"code": "no_fit", "numbers": {"needed": 8, "free": 6, "eta": None}, "job_ids": [7]}


def test_reasons_and_positions_land_on_pending_jobs_only(world: Any, submit: Any) -> None:
    waiting, cancelled = submit(), submit()
    Job.objects.filter(pk=cancelled.pk).update(state=JobState.CANCELLED)  # moved on meanwhile

    written = update_pending_rows([(waiting.pk, REASON, 1, 3), (cancelled.pk, REASON, 2, 4)])

    assert written == 1
    waiting.refresh_from_db()
    cancelled.refresh_from_db()
    assert (waiting.pending_reason, waiting.queue_position, waiting.cluster_position) == (
        REASON,
        1,
        3,
    )
    assert (cancelled.pending_reason, cancelled.queue_position) == (None, None)


def test_positions_can_be_cleared(world: Any, submit: Any) -> None:
    job = submit()
    update_pending_rows([(job.pk, REASON, 1, 1)])
    update_pending_rows([(job.pk, None, None, None)])
    job.refresh_from_db()
    assert (job.pending_reason, job.queue_position, job.cluster_position) == (None, None, None)
