"""A job's page as the one place to look while it runs: how long it has run and has left,
and each attempt with its placement, start, end and how it ended."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.attempts import attempts_of, clock_of
from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobEvent
from gpuqueue.services.jobs.checkpoint import requeue
from gpuqueue.services.jobs.transitions import transition

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


def test_another_teams_member_cannot_see_a_jobs_progress(clients: Any, jobs: Any) -> None:
    # As the job's page: 404, so that the job's existence is not told either.
    assert clients["carol"].get(f"/jobs/{jobs.a_running.pk}/progress/").status_code == 404
    assert clients["bob"].get(f"/jobs/{jobs.a_running.pk}/progress/").status_code == 200
    assert clients["anonymous"].get(f"/jobs/{jobs.a_running.pk}/progress/").status_code == 302


def _requeued_attempts(job: Job, attempts: int) -> None:
    """`attempts` more admissions, each run then requeued, written as the timeline keeps them."""
    start = timezone.now() - timedelta(hours=attempts)
    rows = []
    for n in range(attempts):
        at = start + timedelta(hours=n)
        placement = {"placement": {f"h100-{n % 2}": 2}}
        rows += [
            JobEvent(job=job, from_state="PENDING", to_state="ADMITTED", details=placement),
            JobEvent(job=job, from_state="ADMITTED", to_state="RUNNING"),
            JobEvent(job=job, from_state="RUNNING", to_state="PENDING", reason=f"requeue {n}"),
        ]
        for i, row in enumerate(rows[-3:]):
            row.at = at + timedelta(minutes=i)
    made = JobEvent.objects.bulk_create(rows)
    for row in made:  # `at` is auto_now_add: set it afterwards, as a clock would have
        JobEvent.objects.filter(pk=row.pk).update(at=row.at)


def _queries(client: Any, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_a_job_with_many_attempts_costs_the_same_queries_as_one_with_few(
    clients: Any, jobs: Any
) -> None:
    job = Job.objects.get(pk=jobs.a_pending.pk)
    _requeued_attempts(job, 2)
    page, panel = f"/jobs/{job.pk}/", f"/jobs/{job.pk}/progress/"
    few = _queries(clients["alice"], page), _queries(clients["alice"], panel)
    _requeued_attempts(job, 60)
    body = clients["alice"].get(panel).content.decode()
    assert 'data-attempt="62"' in body and "requeue 59" in body
    assert (_queries(clients["alice"], page), _queries(clients["alice"], panel)) == few


def test_the_job_page_reads_its_events_once(clients: Any, jobs: Any) -> None:
    with CaptureQueriesContext(connection) as queries:
        clients["alice"].get(f"/jobs/{jobs.a_running.pk}/")
    event_reads = [q for q in queries if 'FROM "gpuqueue_jobevent"' in q["sql"]]
    assert len(event_reads) == 1, [q["sql"] for q in event_reads]
