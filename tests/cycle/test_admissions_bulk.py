"""Admissions written in bulk change exactly what one `transition` per job changed."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobEvent, Standing, UsageOutcome, UsageRecord
from gpuqueue.services.accounting import usage_ledger
from gpuqueue.services.jobs.admissions import Admitted, admit_all
from gpuqueue.services.jobs.transitions import transition


def test_admitted_in_bulk_as_one_by_one_would_be(world: Any, submit: Any) -> None:
    jobs = [submit() for _ in range(5)]
    Job.objects.filter(pk=jobs[0].pk).update(estimated_start=timezone.now())
    Standing.objects.create(
        job=jobs[0], reason={"code": "no_capacity"}, queue_position=3, cluster_position=9
    )
    transition(jobs[2], JobState.CANCELLED, reason="by hand", actor="user:alice")
    now = timezone.now()
    wanted = [Admitted(job.pk, {"h100-0": 1}, borrowed=i % 2 == 1) for i, job in enumerate(jobs)][
        ::-1
    ]
    moved = admit_all(wanted, now, "cycle")
    assert moved == [jobs[4].pk, jobs[3].pk, jobs[1].pk, jobs[0].pk]  # the cancelled one not
    for job in Job.objects.filter(pk__in=moved):
        assert job.state == JobState.ADMITTED and job.admitted_at == now
        assert job.placement == {"h100-0": 1} and job.attempts == 1
        assert (job.pending_reason, job.queue_position, job.cluster_position) == (None, None, None)
        assert not Standing.objects.filter(job=job).exists()  # deleted, not left behind
        assert job.estimated_start is None and job.started_at is None
    assert Job.objects.get(pk=jobs[2].pk).state == JobState.CANCELLED
    events = JobEvent.objects.filter(to_state=JobState.ADMITTED).order_by("job_id")
    assert [e.job_id for e in events] == sorted(moved)
    assert {(e.from_state, e.actor) for e in events} == {(JobState.PENDING, "cycle")}
    borrowed = {e.job_id: (e.reason, e.details["borrowed"]) for e in events}
    assert borrowed[jobs[1].pk] == ("borrowing idle GPUs", True)
    assert borrowed[jobs[0].pk] == ("within fair share", False)
    # Each attempt's open ledger row, as the ledger's own code would write it.
    fields = ("job_id", "attempt", "hour", "team_id", "user_id", "flavor_id", "gpus")
    expected = {
        tuple(getattr(row, f) for f in fields) + (row.gpu_seconds, row.outcome)
        for job in Job.objects.filter(pk__in=moved).values_list(*usage_ledger.FIELDS)
        for row in usage_ledger.Attempt.of(job).rows(now, UsageOutcome.OPEN)
    }
    written = set(UsageRecord.objects.values_list(*fields, "gpu_seconds", "outcome"))
    assert written == expected and len(expected) == len(moved)
    assert admit_all(wanted, now, "cycle") == []  # nothing PENDING left to move
