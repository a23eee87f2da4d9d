"""The GPU-hours ledger: its totals are each job's run intervals, whatever happens to the jobs
and to the service (services/accounting/usage_ledger.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.db.models import Q, Sum
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuqueue.core.states import FINAL, HOLDING, JobState
from gpuqueue.core.usage_hours import split_by_hour
from gpuqueue.models import Job, JobEvent, UsageRecord
from gpuqueue.ops.usage_metrics import usage_metrics
from gpuqueue.services.accounting.usage_ledger import fold_usage_totals, record_open_attempts
from gpuqueue.services.jobs.admissions import Admitted, admit_all
from gpuqueue.services.jobs.cancel import cancel_job
from gpuqueue.services.jobs.checkpoint import requeue
from gpuqueue.services.jobs.transitions import Move, move_jobs, transition

T0 = datetime(2026, 3, 1, 9, 40, tzinfo=UTC)


@given(
    start=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)),
    seconds=st.floats(min_value=0, max_value=10 * 86400),
)
def test_an_hour_split_adds_up_to_the_span_and_each_part_fits_its_hour(
    start: datetime, seconds: float
) -> None:
    start = start.replace(tzinfo=UTC)
    end = start + timedelta(seconds=seconds)
    parts = split_by_hour(start, end)
    assert sum(s for _, s in parts) == pytest.approx((end - start).total_seconds(), abs=1e-6)
    assert all(0 < s <= 3600 for _, s in parts)
    hours = [h for h, _ in parts]
    assert hours == sorted(set(hours))
    assert all(h.minute == h.second == h.microsecond == 0 for h in hours)


def test_a_span_across_midnight_is_split_at_each_hour() -> None:
    parts = split_by_hour(
        datetime(2026, 3, 1, 23, 30, tzinfo=UTC), datetime(2026, 3, 2, 1, 15, tzinfo=UTC)
    )
    assert [(h.hour, s) for h, s in parts] == [(23, 1800.0), (0, 3600.0), (1, 900.0)]


# --- The ledger against the jobs' run intervals --------------------------------------------------

ACTIONS = [
    "admit",
    "run",
    "preempt",
    "requeue",
    "succeed",
    "fail",
    "cancel",
    "batch",
    "crash",
    "retry",
    "sweep",
    "restart",
    "cleanup",
]


class Oracle:
    """What the ledger should say, kept by the test from what it did: per (job, attempt) the
    GPUs and the span [admitted, released or last swept)."""

    def __init__(self) -> None:
        self.spans: dict[tuple[int, int], tuple[int, datetime, datetime | None]] = {}
        self.outcomes: dict[tuple[int, int], str] = {}

    def admitted(self, job: Job, at: datetime) -> None:
        self.spans[(job.pk, job.attempts)] = (job.gpus, at, None)

    def released(self, job_id: int, attempt: int, outcome: str) -> None:
        gpus, start, _ = self.spans[(job_id, attempt)]
        end = JobEvent.objects.filter(job_id=job_id).latest("at", "id").at
        self.spans[(job_id, attempt)] = (gpus, start, end)
        self.outcomes[(job_id, attempt)] = outcome

    def swept(self, at: datetime) -> None:
        for key, (gpus, start, end) in self.spans.items():
            if key not in self.outcomes:
                self.spans[key] = (gpus, start, max(at, end or at))

    def seconds(self) -> dict[tuple[int, int], float]:
        return {
            key: gpus * (end - start).total_seconds()
            for key, (gpus, start, end) in self.spans.items()
            if end is not None
        }


def _release(job: Job, action: str, root: Any) -> tuple[bool, str]:
    """Apply a releasing action to a holding job; returns (moved, the outcome it should log)."""
    was = job.state
    if action == "requeue":
        return requeue(
            job, "test requeue"
        ), "preempted" if was == JobState.PREEMPTING else "requeued"
    if action == "cancel":
        cancel_job(root, job)
        return True, "cancelled"
    to = JobState.SUCCEEDED if action == "succeed" else JobState.FAILED
    moved = transition(job, to, reason=action, actor="test", finished_at=timezone.now())
    return moved, to.value.lower()


def _cancel_in_one_statement(jobs: list[Job]) -> None:
    """What a set-based writer does (cancelling an array's tasks): every job in one move of
    the door, whatever state each holds its GPUs in."""
    moves = [Move(job.pk, job.state) for job in jobs]
    moved = move_jobs(
        moves,
        JobState.CANCELLED,
        reason="array cancelled",
        actor="test",
        changes={"finished_at": timezone.now()},
    )
    assert moved == [job.pk for job in jobs]


def _sweep(oracle: Oracle) -> None:
    """The minute's task (gpuqueue.record_usage), delivered twice as a beat may; the totals'
    parts are folded between the two, so that both folded and fresh parts are counted."""
    now = timezone.now()
    for _ in range(2):
        record_open_attempts(now)
        fold_usage_totals()
    oracle.swept(now)


def _assert_counters_equal_the_ledger() -> None:
    """/metrics' GPU-seconds counters (read from the triggers' totals) equal sums over the
    ledger's rows, per team and flavor."""
    counters = {
        family.name: {
            (s.labels["team"], s.labels["flavor"]): s.value
            for s in family.samples
            if s.name.endswith("_total")
        }
        for family in usage_metrics()
        if family.type == "counter"
    }
    ledger = {
        (row["team__slug"], row["flavor__name"]): row
        for row in UsageRecord.objects.values("team__slug", "flavor__name").annotate(
            held=Sum("gpu_seconds"),
            lost=Sum("gpu_seconds", filter=Q(outcome="preempted")),
            idle=Sum("idle_gpu_seconds"),
        )
    }
    for name, column in (
        ("gpuqueue_gpu_seconds_held", "held"),
        ("gpuqueue_gpu_seconds_preempted", "lost"),
        ("gpuqueue_gpu_seconds_idle", "idle"),
    ):
        # A team and flavor whose rows were all deleted may keep a counter of 0.
        got = {key: value for key, value in counters[name].items() if value or key in ledger}
        want = {key: row[column] or 0.0 for key, row in ledger.items()}
        assert got == pytest.approx(want, rel=1e-9, abs=1e-3), name


def _applies(action: str, job: Job, stale: dict[int, Job]) -> bool:
    if action == "admit":
        return job.state == JobState.PENDING
    if action == "run":
        return job.state == JobState.ADMITTED
    if action == "preempt":
        return job.state in (JobState.ADMITTED, JobState.RUNNING)
    if action == "retry":
        copy = stale.get(job.pk)
        return copy is not None and copy.state in HOLDING and copy.state != job.state
    if action == "cleanup":
        return job.state in FINAL
    return action in ("sweep", "restart") or job.state in HOLDING


@pytest.mark.django_db(transaction=True)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(ACTIONS), st.integers(0, 2), st.floats(0.01, 30.0)),
        min_size=4,
        max_size=40,
    ),
    shapes=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 8)), min_size=3, max_size=3),
)
# An attempt admitted (dated) before its predecessor's release was written, then released by
# a set-based move: closed at its own release, not at the predecessor's.
@example(
    steps=[("admit", 0, 1.0), ("requeue", 0, 1.0), ("admit", 0, 1.0), ("batch", 0, 1.0)],
    shapes=[(1, 1), (1, 1), (1, 1)],
)
# Attempts in three holding states released by one set-based move, then swept.
@example(
    steps=[
        *[("admit", 0, 2.5)] * 3,
        ("run", 0, 1.0),
        ("preempt", 1, 1.0),
        ("batch", 0, 1.0),
        ("sweep", 0, 1.0),
    ],
    shapes=[(1, 1), (2, 4), (3, 8)],
)
def test_the_ledger_totals_equal_the_sum_of_every_attempts_run_interval(
    world: Any, submit: Any, steps: list[tuple[str, int, float]], shapes: list[tuple[int, int]]
) -> None:
    """Random admissions, preemptions, requeues, failures, cancellations (also of every job
    holding GPUs in one set-based move), sweeps of running attempts, crashed transactions,
    restarts (new connections, then the first sweep), retried transitions with stale copies and
    deleted jobs: per attempt, and so in total, the ledger holds GPUs × (release - admission),
    split by hour, with the outcome of the release; an attempt still holding GPUs is counted up
    to the last sweep (one runs at the end, as the service's next minute would)."""
    UsageRecord.objects.all().delete()
    Job.objects.all().delete()
    jobs = [submit(workers=w, gpus_per_worker=g) for w, g in shapes]
    ids = [job.pk for job in jobs]
    oracle = Oracle()
    stale: dict[int, Job] = {}
    for action, n, hours_ago in steps:
        # The action falls on the n-th job it applies to, so that few steps are wasted.
        candidates = [
            job
            for job in Job.objects.filter(pk__in=ids).order_by("pk")
            if _applies(action, job, stale)
        ]
        if not candidates:
            continue
        job = candidates[n % len(candidates)]
        if action == "admit":
            at = timezone.now() - timedelta(hours=hours_ago)
            assert admit_all([Admitted(job.pk, {"h100-0": job.workers}, False)], at, "cycle")
            job.refresh_from_db()
            oracle.admitted(job, at)
        elif action == "run":
            stale[job.pk] = Job.objects.get(pk=job.pk)
            assert transition(job, JobState.RUNNING, reason="running", actor="test")
        elif action == "preempt":
            stale[job.pk] = Job.objects.get(pk=job.pk)
            assert transition(job, JobState.PREEMPTING, reason="preempt", actor="test")
        elif action in ("requeue", "succeed", "fail", "cancel"):
            stale[job.pk] = Job.objects.get(pk=job.pk)
            attempt = job.attempts
            moved, outcome = _release(job, action, world.root)
            assert moved
            oracle.released(job.pk, attempt, outcome)
        elif action == "batch":
            holding = list(Job.objects.filter(pk__in=ids, state__in=HOLDING).order_by("pk"))
            stale.update({held.pk: Job.objects.get(pk=held.pk) for held in holding})
            _cancel_in_one_statement(holding)
            for held in holding:
                oracle.released(held.pk, held.attempts, "cancelled")
        elif action == "crash":
            # The service dies after the release was written but before it committed.
            before = list(
                UsageRecord.objects.values_list("job_id", "attempt", "hour", "gpu_seconds")
            )
            with pytest.raises(RuntimeError), transaction.atomic():
                transition(
                    job, JobState.FAILED, reason="x", actor="test", finished_at=timezone.now()
                )
                raise RuntimeError("killed")
            assert Job.objects.get(pk=job.pk).state in HOLDING
            assert (
                list(UsageRecord.objects.values_list("job_id", "attempt", "hour", "gpu_seconds"))
                == before
            )
        elif action == "retry":
            # A retried call with the copy read before the job moved changes nothing.
            assert not transition(
                stale[job.pk],
                JobState.FAILED,
                reason="retry",
                actor="test",
                finished_at=timezone.now(),
            )
        elif action == "sweep":
            _sweep(oracle)
        elif action == "restart":
            # The service's processes die and start again: nothing of the ledger lives in them.
            connections.close_all()
            _sweep(oracle)
        elif action == "cleanup":
            job.delete()  # history cleanup: the ledger keeps its rows

    _sweep(oracle)
    _assert_counters_equal_the_ledger()
    want = oracle.seconds()
    got: dict[tuple[int, int], float] = {
        (row["job_id"], row["attempt"]): row["s"]
        for row in UsageRecord.objects.values("job_id", "attempt").annotate(s=Sum("gpu_seconds"))
    }
    assert got.keys() == want.keys()
    for key, seconds in want.items():
        assert got[key] == pytest.approx(seconds, rel=1e-9, abs=1e-6), key
    for (job_id, attempt), outcome in oracle.outcomes.items():
        if (job_id, attempt) in want:
            logged = set(
                UsageRecord.objects.filter(job_id=job_id, attempt=attempt).values_list(
                    "outcome", flat=True
                )
            )
            assert logged == {outcome}
    for (job_id, attempt), (_gpus, start, end) in oracle.spans.items():
        # One row per hour held, and the admission's row for an attempt that ended as it began.
        assert end is not None
        assert UsageRecord.objects.filter(job_id=job_id, attempt=attempt).count() == max(
            1, len(split_by_hour(start, end))
        )


def test_cancelling_an_array_closes_the_attempts_of_its_tasks_holding_gpus_at_once(
    api: Any, job_body: Any
) -> None:
    """Cancelling an array's tasks is one set-based move: the attempts of the tasks that held
    GPUs (running, admitted) are closed at the cancel, in the same statement, before any
    minute's sweep; a pending task had no attempt and gets no row."""
    from gpuqueue.tasks import record_usage_task

    array = api("alice").post("/api/v1/arrays/", {**job_body, "array": "0-2"}, format="json")
    assert array.status_code == 201, array.content
    running, admitted, pending = Job.objects.filter(array_id=array.json()["id"]).order_by(
        "array_index"
    )
    started = timezone.now() - timedelta(minutes=90)
    assert admit_all([Admitted(running.pk, {"h100-0": running.workers}, False)], started, "c")
    running.refresh_from_db()
    assert transition(running, JobState.RUNNING, reason="running", actor="test")
    record_usage_task()  # a minute while it runs: its rows are open
    assert UsageRecord.objects.filter(job_id=running.pk, outcome="").exists()
    later = timezone.now() - timedelta(minutes=5)
    assert admit_all([Admitted(admitted.pk, {"h100-1": admitted.workers}, False)], later, "c")

    cancel = api("alice").post(f"/api/v1/arrays/{array.json()['id']}/cancel/", {}, format="json")
    assert cancel.status_code == 200, cancel.content
    assert set(Job.objects.filter(array_id=array.json()["id"]).values_list("state", flat=True)) == {
        JobState.CANCELLED
    }
    for task, admitted_at in ((running, started), (admitted, later)):
        cancelled_at = JobEvent.objects.filter(job_id=task.pk).latest("at", "id").at
        rows = UsageRecord.objects.filter(job_id=task.pk, attempt=1)
        assert set(rows.values_list("outcome", flat=True)) == {"cancelled"}
        held = rows.aggregate(s=Sum("gpu_seconds"))["s"]
        assert held == pytest.approx(task.gpus * (cancelled_at - admitted_at).total_seconds())
    assert not UsageRecord.objects.filter(job_id=pending.pk).exists()
    assert not UsageRecord.objects.filter(outcome="").exists()  # nothing left for a sweep
    assert record_usage_task() == 0
