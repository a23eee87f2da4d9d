"""Estimates that moved later: how often, and why the last time, kept on the job.

Each forecast compares a pending job's most likely start with the one stored before. A start
later by more than `slack` (or gone: no estimate any more) is a move, and its cause is read
from the jobs admitted on the job's flavor since the previous forecast (`cause_of`):

| code           | cause                                                                      |
| -------------- | -------------------------------------------------------------------------- |
| borrowed       | another team's job took GPUs beyond its team's fair share (the largest)    |
| newer_own_team | a job of the job's own team, submitted after it, started first             |
| started_ahead  | another job started first (a higher priority, a team below its share)      |
| ran_longer     | none started: the jobs in its way are running longer than predicted        |

Kept in Job.forecast["later"] as {"count": moves so far, "cause": {code, job, team, workers,
gpus_per_worker}} while the job is pending; the job page and the API's `start_band` give it as
a sentence (`later_text`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobEvent

BORROWED = "borrowed"
NEWER_OWN_TEAM = "newer_own_team"
STARTED_AHEAD = "started_ahead"
RAN_LONGER = "ran_longer"
# A start that moves by less than this, or a tenth of the wait it had, has not moved: the
# forecast steps through time in windows of about that size (scheduler/forecast.py).
MIN_SLACK = timedelta(minutes=5)


def moved_later(old: datetime | None, new: datetime | None, now: datetime) -> bool:
    """Whether an estimated start `old` became `new` later (None: no estimate)."""
    if old is None:
        return False
    if new is None:
        return True  # a promised start vanished
    slack = max(MIN_SLACK, (old - now) / 10)
    return new - old > slack


class Started(NamedTuple):
    """A job admitted since the previous forecast."""

    id: int
    team: str
    workers: int
    gpus_per_worker: int
    submitted_at: datetime
    borrowed: bool


def cause_of(team: str, submitted_at: datetime, started: Iterable[Started]) -> dict[str, Any]:
    """The cause of a move for a job of `team` submitted at `submitted_at`, from the jobs of
    its flavor admitted since the previous forecast (the table above, first code first; the
    largest job of the code)."""
    ranked: list[tuple[int, int, Started]] = []
    for job in started:
        if job.team != team and job.borrowed:
            rank = 0
        elif job.team == team and job.submitted_at > submitted_at:
            rank = 1
        else:
            rank = 2
        ranked.append((rank, -job.workers * job.gpus_per_worker, job))
    if not ranked:
        return {"code": RAN_LONGER}
    rank, _, job = min(ranked, key=lambda r: (r[0], r[1], r[2].id))
    return {
        "code": (BORROWED, NEWER_OWN_TEAM, STARTED_AHEAD)[rank],
        "job": job.id,
        "team": job.team,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
    }


def admitted_since(since: datetime, now: datetime) -> dict[str, list[Started]]:
    """Per flavor, the jobs admitted in (since, now], with whether each borrowed (its admission
    event says so: services/jobs/admissions.py)."""
    rows = list(
        Job.objects.filter(admitted_at__gt=since, admitted_at__lte=now).values_list(
            "id", "team__slug", "flavor__name", "workers", "gpus_per_worker", "submitted_at"
        )
    )
    if not rows:
        return {}
    borrowed = set(
        JobEvent.objects.filter(
            job_id__in=[row[0] for row in rows],
            to_state=JobState.ADMITTED,
            at__gt=since,
            details__borrowed=True,
        ).values_list("job_id", flat=True)
    )
    out: dict[str, list[Started]] = {}
    for job_id, team, flavor, workers, per, submitted in rows:
        out.setdefault(flavor, []).append(
            Started(job_id, team, workers, per, submitted, job_id in borrowed)
        )
    return out


def updated(
    previous: Mapping[str, Any] | None, cause: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The job's record of moves: the previous one (from its stored forecast), counted once
    more with `cause` when the estimate moved later now (None: it did not)."""
    if cause is None:
        return dict(previous) if previous else None
    count = previous.get("count", 0) if previous else 0
    return {"count": count + 1, "cause": dict(cause)}


def later_text(later: Mapping[str, Any] | None) -> str:
    """'Estimate moved later 3 times; last: team-b's job #12 (3 × 8 GPUs) borrowed the GPUs.';
    '' when it never moved later."""
    if not later or not later.get("count"):
        return ""
    count = later["count"]
    times = "once" if count == 1 else "twice" if count == 2 else f"{count} times"
    cause = later.get("cause") or {}
    code = cause.get("code")
    job = f"job #{cause.get('job')} ({cause.get('workers')} × {cause.get('gpus_per_worker')} GPUs)"
    team = cause.get("team")
    why = {
        BORROWED: f"team {team}'s {job} borrowed the GPUs beyond its team's fair share",
        NEWER_OWN_TEAM: f"its own team's newer {job} started first",
        STARTED_AHEAD: f"team {team}'s {job} started first",
        RAN_LONGER: "the jobs in its way are running longer than predicted",
    }.get(code, "the queue ahead changed")
    return f"Estimate moved later {times}; last: {why}."


def moves(
    pending: Iterable[tuple[int, str, str, float]],
    stored: Mapping[int, tuple[datetime | None, Any]],
    estimates: Mapping[int, datetime | None],
    since: datetime,
    now: datetime,
) -> dict[int, dict[str, Any] | None]:
    """Each pending job's record of moves after this forecast. `pending`: (id, team, flavor,
    submitted at, epoch seconds) of the snapshot's jobs; `stored`: id -> (the estimated start
    stored, the stored forecast); `estimates`: id -> this forecast's start. Reads the jobs
    admitted since `since` only when some estimate moved later."""
    moved: list[tuple[int, str, str, float]] = []
    out: dict[int, dict[str, Any] | None] = {}
    for job in pending:
        job_id = job[0]
        if job_id not in stored:
            continue
        start, forecast = stored[job_id]
        previous = forecast.get("later") if isinstance(forecast, dict) else None
        out[job_id] = updated(previous, None)
        if moved_later(start, estimates.get(job_id), now):
            moved.append(job)
    if moved:
        started = admitted_since(since, now)
        for job_id, team, flavor, submitted in moved:
            at = datetime.fromtimestamp(submitted, tz=now.tzinfo)
            others = [s for s in started.get(flavor, ()) if s.id != job_id]
            previous = (
                stored[job_id][1].get("later") if isinstance(stored[job_id][1], dict) else None
            )
            out[job_id] = updated(previous, cause_of(team, at, others))
    return out
