"""Admissions written in bulk change exactly what one `transition` per job changed."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobEvent
from gpuqueue.services import admissions
from gpuqueue.services.admissions import Admitted, admit_all
from gpuqueue.services.transitions import transition


@pytest.mark.parametrize("chunk", [1000, 2])  # one statement, and several
def test_admitted_in_bulk_as_one_by_one_would_be(
    world: Any, submit: Any, monkeypatch: Any, chunk: int
) -> None:
    monkeypatch.setattr(admissions, "CHUNK", chunk)
    jobs = [submit() for _ in range(5)]
    Job.objects.filter(pk=jobs[0].pk).update(
        pending_reason={"code": "no_capacity"},
        queue_position=3,
        cluster_position=9,
        estimated_start=timezone.now(),
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
        assert job.estimated_start is None and job.started_at is None
    assert Job.objects.get(pk=jobs[2].pk).state == JobState.CANCELLED
    events = JobEvent.objects.filter(to_state=JobState.ADMITTED).order_by("job_id")
    assert [e.job_id for e in events] == sorted(moved)
    assert {(e.from_state, e.actor) for e in events} == {(JobState.PENDING, "cycle")}
    borrowed = {e.job_id: (e.reason, e.details["borrowed"]) for e in events}
    assert borrowed[jobs[1].pk] == ("borrowing idle GPUs", True)
    assert borrowed[jobs[0].pk] == ("within fair share", False)
    assert admit_all(wanted, now, "cycle") == []  # nothing PENDING left to move
