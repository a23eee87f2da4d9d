"""A job's page as the one place to look while it runs: how long it has run and has left,
and each attempt with its placement, start, end and how it ended."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django.utils import timezone

from dashboard.attempts import attempts_of, clock_of
from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.checkpoint import requeue
from gpuqueue.services.transitions import transition

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def event(minute: int, frm: str, to: str, reason: str = "", **details: Any) -> SimpleNamespace:
    return SimpleNamespace(
        at=T0 + timedelta(minutes=minute),
        from_state=frm,
        to_state=to,
        reason=reason,
        details=details,
    )


def test_a_requeued_job_has_two_attempts_each_with_its_placement_and_ending() -> None:
    timeline = [
        event(0, "", "PENDING", "submitted"),
        event(1, "PENDING", "ADMITTED", "fits", placement={"h100-1": 1, "h100-0": 2}),
        event(2, "ADMITTED", "RUNNING", "every worker is running"),
        event(30, "RUNNING", "PREEMPTING", "preempted for job 9"),
        event(31, "PREEMPTING", "PREEMPTING", "checkpoint acknowledged: s3://ck"),
        event(32, "PREEMPTING", "PENDING", "checkpointed", placement={"h100-0": 2}),
        event(40, "PENDING", "ADMITTED", "fits", placement={"h100-3": 3}),
        event(41, "ADMITTED", "RUNNING", "every worker is running"),
    ]
    first, second = attempts_of(timeline)
    assert first.placement == [("h100-0", 2), ("h100-1", 1)]
    assert (first.started_at, first.ended_at) == (
        T0 + timedelta(minutes=2),
        T0 + timedelta(minutes=32),
    )
    assert (first.ending, first.preempted, first.why) == ("requeued", True, "checkpointed")
    assert second.placement == [("h100-3", 3)] and second.current and second.ending == ""


def test_an_attempt_that_never_ran_and_a_cancel_while_pending() -> None:
    timeline = [
        event(0, "", "PENDING"),
        event(1, "PENDING", "ADMITTED", placement={"n": 1}),
        event(6, "ADMITTED", "PENDING", "workers never became ready"),
        event(7, "PENDING", "CANCELLED", "cancelled"),  # not an attempt's end: it held nothing
    ]
    (only,) = attempts_of(timeline)
    assert only.started_at is None and only.ending == "requeued"
    assert only.ended_at == T0 + timedelta(minutes=6)


def job_fields(**fields: Any) -> SimpleNamespace:
    base = {
        "submitted_at": T0,
        "admitted_at": T0,
        "started_at": T0,
        "finished_at": None,
        "max_runtime_seconds": None,
        "expected_runtime_seconds": None,
    }
    return SimpleNamespace(**{**base, **fields})


def test_remaining_time_counts_against_the_max_runtime_then_the_expected_one() -> None:
    now = T0 + timedelta(hours=1)
    clock = clock_of(job_fields(max_runtime_seconds=4 * 3600, expected_runtime_seconds=600), now)
    assert (clock.elapsed, clock.remaining, clock.limit_kind) == (3600, 3 * 3600, "maximum runtime")
    assert clock.percent == 25 and clock.ends_at(now) == T0 + timedelta(hours=4)
    over = clock_of(job_fields(expected_runtime_seconds=600), now)
    assert over.limit_kind == "expected runtime" and over.over and over.remaining == 600 - 3600
    unknown = clock_of(job_fields(), now)
    assert unknown.remaining is None and unknown.percent is None
    waiting = clock_of(job_fields(admitted_at=None, started_at=None, max_runtime_seconds=60), now)
    assert waiting.elapsed is None and waiting.remaining is None


def test_a_running_jobs_page_shows_its_clock_and_attempts(clients: Any, jobs: Any) -> None:
    started = timezone.now() - timedelta(minutes=30)
    Job.objects.filter(pk=jobs.a_running.pk).update(
        started_at=started, admitted_at=started, max_runtime_seconds=2 * 3600
    )
    page = clients["alice"].get(f"/jobs/{jobs.a_running.pk}/").content.decode()
    section = page[page.index('id="job-progress"') :]
    assert 'id="job-elapsed">30 min' in section
    assert re.search(r'id="job-remaining">1 h (29|30) min, until <time', section)
    assert "h100-0 × 2" in section and "holding GPUs" in section
    assert f'hx-get="/jobs/{jobs.a_running.pk}/progress/"' in section


def test_a_requeued_then_finished_job_lists_both_attempts_and_stops_polling(
    clients: Any, jobs: Any
) -> None:
    job = Job.objects.get(pk=jobs.a_running.pk)
    assert requeue(job, "node h100-0 went NotReady")
    job = Job.objects.get(pk=job.pk)
    transition(
        job,
        JobState.ADMITTED,
        reason="fits",
        actor="cycle",
        details={"placement": {"h100-1": 2}},
        placement={"h100-1": 2},
        admitted_at=timezone.now(),
    )
    transition(job, JobState.RUNNING, reason="running", actor="cluster", started_at=timezone.now())
    transition(
        job, JobState.SUCCEEDED, reason="exit code 0", actor="cluster", finished_at=timezone.now()
    )
    response = clients["alice"].get(f"/jobs/{job.pk}/progress/", HTTP_HX_REQUEST="true")
    assert response.status_code == 286  # final: the panel stops asking
    body = response.content.decode()
    assert 'data-attempt="1"' in body and 'data-attempt="2"' in body
    assert "requeued</span>: node h100-0 went NotReady" in body
    assert "h100-1 × 2" in body and "succeeded</span>: exit code 0" in body
    assert "hx-get" not in body and "Ran for" in body


def test_a_pending_job_says_it_has_not_started(clients: Any, jobs: Any) -> None:
    body = clients["alice"].get(f"/jobs/{jobs.a_pending.pk}/progress/").content.decode()
    assert "Not started yet." in body and "None yet" in body
