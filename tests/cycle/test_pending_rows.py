"""The cycle's one-statement write of reasons and positions on pending jobs."""

from __future__ import annotations

from typing import Any

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, Standing
from gpuqueue.services.jobs.pending import update_pending_rows

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


def test_written_as_the_orm_writes_them(world: Any, submit: Any) -> None:
    """The arrays' shortcut (one JSON document, binary integers) stores what `update()` does:
    None as SQL NULL, JSON text with quotes, backslashes and non-ASCII intact, row by row."""
    values = [
        (REASON, 1, 2),
        (None, None, None),
        ({"code": 'say "hi"\\n', "numbers": {"ü": 1.5, "big": 2**40}, "job_ids": []}, 7, None),
        ({"code": "x", "numbers": {}, "job_ids": [1, 2, 3]}, None, 9),
    ]
    bulk = [submit() for _ in values]
    plain = [submit() for _ in values]
    update_pending_rows([(job.pk, *row) for job, row in zip(bulk, values, strict=True)])
    for job, (reason, team, cluster) in zip(plain, values, strict=True):
        Standing.objects.create(
            job=job, reason=reason, queue_position=team, cluster_position=cluster
        )
    shown = ("standing__reason", "standing__queue_position", "standing__cluster_position")
    for a, b in zip(bulk, plain, strict=True):
        assert Job.objects.values_list(*shown).get(pk=a.pk) == values[bulk.index(a)]
        assert Job.objects.values_list(*shown).get(pk=a.pk) == (
            Job.objects.values_list(*shown).get(pk=b.pk)
        )
    assert Standing.objects.filter(job=bulk[1], reason__isnull=True).exists()  # SQL NULL


def test_a_standing_left_behind_a_job_that_moved_on_shows_nothing(world: Any, submit: Any) -> None:
    """An explain that raced a cancel may write a standing after the door deleted it: what a
    job shows is read only while it is PENDING."""
    job = submit()
    update_pending_rows([(job.pk, REASON, 2, 5)])
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)  # behind the door's back
    job = Job.objects.select_related("standing").get(pk=job.pk)
    assert Standing.objects.filter(job=job).exists()
    assert (job.pending_reason, job.queue_position, job.cluster_position) == (None, None, None)
