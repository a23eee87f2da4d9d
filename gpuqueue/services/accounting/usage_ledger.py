"""The GPU-hours ledger: what each attempt of each job held, per clock hour (UsageRecord).

An attempt holds its GPUs from its admission (`Job.admitted_at`) until the transition that
takes the job out of ADMITTED, RUNNING and PREEMPTING (the time of that transition's event).
Its writers upsert values computed from that span (never increments), so a retry or a
second run writes the same rows:

0. `record_admissions`, called by the cycle's admissions in their transaction: an open row of
   zero GPU-seconds in the hour of admission, so that every attempt has a row from its start
   (and a release that bypasses `transition` is found by 3 below, however soon it comes).
1. `lock_attempt` + `record_release`, called by `transition` inside the transaction that
   moves the job: the attempt's final rows commit with the job's new state and its event, or
   not at all, so a crash between them can neither lose nor double count an attempt.
2. `record_open_attempts`, every minute: the rows of attempts still holding GPUs, up to now,
   so that reports include running jobs. Both lock the job's row: a release waits for a
   running `record_open_attempts` (which skips jobs locked by a transition), so the release
   writes last, with the later end.
3. `close_released_attempts`, in the same minute: an attempt whose rows are still open though
   its job no longer holds GPUs was released by a set-based writer that bypasses `transition`
   (cancelling an array's tasks in one statement); its rows are closed from the job's events,
   at the time of the release event, as `transition` would have.

Triggers keep the ledger's totals per team and flavor (UsageTotal, for /metrics) whoever
writes; `fold_usage_totals` merges their parts in the same minute.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from gpuqueue.core.states import HOLDING, JobState
from gpuqueue.core.usage_hours import hour_of, split_by_hour
from gpuqueue.models import Job, JobEvent, UsageOutcome, UsageRecord, UsageTotal

FIELDS = (
    "id",
    "attempts",
    "admitted_at",
    "team_id",
    "user_id",
    "flavor_id",
    "workers",
    "gpus_per_worker",
)
UPSERT = {
    "update_conflicts": True,
    "unique_fields": ["job_id", "attempt", "hour"],
    # used_gpu_seconds and idle_gpu_seconds belong to the activity sampler: kept.
    "update_fields": ["gpus", "gpu_seconds", "outcome"],
}
CHUNK = 1000


@dataclass(frozen=True, slots=True)
class Attempt:
    job_id: int
    attempt: int
    admitted_at: datetime
    team_id: int
    user_id: int
    flavor_id: int
    gpus: int

    @classmethod
    def of(cls, row: tuple) -> Attempt:
        job_id, attempt, admitted_at, team_id, user_id, flavor_id, workers, gpw = row
        return cls(job_id, attempt, admitted_at, team_id, user_id, flavor_id, workers * gpw)

    def rows(
        self, end: datetime, outcome: str, from_hour: datetime | None = None
    ) -> list[UsageRecord]:
        """Its ledger rows from its admission (or from `from_hour` on) to `end`: at least the
        row of its admission's hour, with no GPU-seconds when it ended as it began."""
        spans = split_by_hour(self.admitted_at, end) or [(hour_of(self.admitted_at), 0.0)]
        if from_hour is not None:
            spans = [(hour, seconds) for hour, seconds in spans if hour >= from_hour]
        return [
            UsageRecord(
                job_id=self.job_id,
                attempt=self.attempt,
                hour=hour,
                team_id=self.team_id,
                user_id=self.user_id,
                flavor_id=self.flavor_id,
                gpus=self.gpus,
                gpu_seconds=self.gpus * seconds,
                outcome=outcome,
            )
            for hour, seconds in spans
        ]


def record_admissions(job_ids: list[int]) -> None:
    """The open admission rows of the attempts just started (the module docstring, 0): what
    `Attempt.rows(admitted_at, OPEN)` gives (zero GPU-seconds in the hour of admission), in
    one INSERT … SELECT (a wave admits thousands of jobs in one cycle)."""
    if not job_ids:
        return
    quote = connection.ops.quote_name
    column = {f.name: quote(f.column) for f in UsageRecord._meta.concrete_fields}
    job = {name: quote(Job._meta.get_field(name).column) for name in FIELDS}
    hour = f"date_trunc('hour', {job['admitted_at']} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(UsageRecord._meta.db_table)} ({column['job_id']}, "
            f"{column['attempt']}, {column['hour']}, {column['team']}, {column['user']}, "
            f"{column['flavor']}, {column['gpus']}, {column['gpu_seconds']}, "
            f"{column['outcome']}, {column['idle_gpu_seconds']}) "
            f"SELECT {job['id']}, {job['attempts']}, {hour}, {job['team_id']}, "
            f"{job['user_id']}, {job['flavor_id']}, {job['workers']} * "
            f"{job['gpus_per_worker']}, 0, %s, 0 FROM {quote(Job._meta.db_table)} "
            f"WHERE {job['id']} = ANY(%b::bigint[]) AND {job['admitted_at']} IS NOT NULL "
            "ON CONFLICT DO NOTHING",
            [UsageOutcome.OPEN.value, job_ids],
        )


def outcome_of(from_state: str, to_state: str) -> str:
    """How an attempt ended, from the transition that released its GPUs."""
    if to_state == JobState.PENDING:
        if from_state == JobState.PREEMPTING:
            return UsageOutcome.PREEMPTED
        return UsageOutcome.REQUEUED
    return str(to_state).lower()


def releases(from_state: str, to_state: str) -> bool:
    return from_state in HOLDING and to_state not in HOLDING


def lock_attempt(job_id: int, state: str) -> Attempt | None:
    """The attempt of the job if it is still in `state`, its row locked until commit (so the
    attempt read is the one the transition ends, even if the caller's copy is stale)."""
    row = (
        Job.objects.select_for_update(no_key=True)
        .filter(pk=job_id, state=state, admitted_at__isnull=False)
        .values_list(*FIELDS)
        .first()
    )
    return Attempt.of(row) if row else None


def record_release(attempt: Attempt, from_state: str, to_state: str, end: datetime) -> None:
    """Write the final rows of an attempt that a transition ends at `end`."""
    rows = attempt.rows(end, outcome_of(from_state, to_state))
    UsageRecord.objects.bulk_create(rows, batch_size=CHUNK, **UPSERT)


def record_open_attempts(now: datetime | None = None) -> int:
    """Upsert the rows, up to `now`, of every attempt still holding GPUs; returns how many.

    Only from each attempt's latest row on: the hours before it were whole when an earlier
    minute wrote them, so a job held for weeks costs a row or two a minute, not its history."""
    now = now or timezone.now()
    with transaction.atomic():
        attempts = [
            Attempt.of(row)
            for row in Job.objects.filter(state__in=HOLDING, admitted_at__isnull=False)
            .select_for_update(skip_locked=True, no_key=True)
            .order_by("id")
            .values_list(*FIELDS)
        ]
        latest = {
            (r["job_id"], r["attempt"]): r["hour"]
            for r in UsageRecord.objects.filter(outcome=UsageOutcome.OPEN)
            .values("job_id", "attempt")
            .annotate(hour=Max("hour"))
            .order_by()
        }
        rows = [
            row
            for a in attempts
            for row in a.rows(now, UsageOutcome.OPEN, latest.get((a.job_id, a.attempt)))
        ]
        UsageRecord.objects.bulk_create(rows, batch_size=CHUNK, **UPSERT)
    return len(rows)


def close_released_attempts() -> int:
    """Close the open rows of attempts whose job has left the GPU-holding states without
    `transition` (the module docstring, 3); returns how many attempts it closed. Rows of a job
    deleted meanwhile stay open: nothing is left to say when it ended."""
    closed = 0
    open_keys = set(
        UsageRecord.objects.filter(outcome=UsageOutcome.OPEN)
        .values_list("job_id", "attempt")
        .distinct()
    )
    if not open_keys:
        return 0
    job_ids = {job_id for job_id, _ in open_keys}
    with transaction.atomic():
        for row in (
            Job.objects.filter(pk__any=job_ids, admitted_at__isnull=False)
            .exclude(state__in=HOLDING)
            .select_for_update(skip_locked=True, no_key=True)
            .order_by("id")
            .values_list(*FIELDS)
        ):
            attempt = Attempt.of(row)
            if (attempt.job_id, attempt.attempt) not in open_keys:
                continue  # a later attempt: the open one's admission time is gone
            # The job's last release is this attempt's (another would have needed a new
            # admission): the last written, not the earliest after `admitted_at`, which may be
            # the previous attempt's when an admission is dated before that was written.
            release = (
                JobEvent.objects.filter(
                    job_id=attempt.job_id, from_state__in=HOLDING, at__gte=attempt.admitted_at
                )
                .exclude(to_state__in=HOLDING)
                .order_by("-id")
                .values_list("from_state", "to_state", "at")
                .first()
            )
            if release is None:
                continue
            from_state, to_state, end = release
            # Rows past the release (a sweep that ran late) go: the release ends the attempt.
            UsageRecord.objects.filter(
                job_id=attempt.job_id, attempt=attempt.attempt, hour__gt=end
            ).delete()
            record_release(attempt, from_state, to_state, end)
            closed += 1
    return closed


def fold_usage_totals() -> None:
    """Merge UsageTotal's parts into one row per team and flavor, in one statement: parts that
    triggers append meanwhile are not deleted, so the sums stay equal to the ledger's."""
    table = UsageTotal._meta.db_table
    columns = "gpu_seconds, preempted_gpu_seconds, idle_gpu_seconds"
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH parts AS (DELETE FROM {table} RETURNING team_id, flavor_id, {columns}) "
            f"INSERT INTO {table} (team_id, flavor_id, {columns}) "
            "SELECT team_id, flavor_id, SUM(gpu_seconds), SUM(preempted_gpu_seconds), "
            "SUM(idle_gpu_seconds) FROM parts GROUP BY team_id, flavor_id"
        )
