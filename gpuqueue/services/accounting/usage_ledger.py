"""The GPU-hours ledger: what each attempt of each job held, per clock hour (UsageRecord).

An attempt holds its GPUs from its admission (`Job.admitted_at`) until the move that takes the
job out of ADMITTED, RUNNING and PREEMPTING (the time of that move's event). Its writers upsert
values computed from that span (never increments), so a retry or a second run writes the same
rows:

0. `opened_rows_sql`, in the statement of the door that admits (services/jobs/transitions.py): an
   open row of zero GPU-seconds in the hour of admission, so that every attempt has a row from
   its start.
1. `released_rows_sql`, in the statement of the door that releases GPUs: the attempt's final
   rows commit with the job's new state and its event, or not at all, so a crash between them
   can neither lose nor double count an attempt, and no move can forget them.
2. `record_open_attempts`, every minute: the rows of attempts still holding GPUs, up to now,
   so that reports include running jobs. Both lock the job's row: a release waits for a
   running `record_open_attempts` (which skips jobs locked by a move), so the release writes
   last, with the later end.

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
from gpuqueue.models import Job, UsageOutcome, UsageRecord, UsageTotal

FIELDS = (
    "id",
    "attempts",
    "admitted_at",
    "team_id",
    "user_id",
    "flavor_id",
    "workers",
    "gpus_per_worker",
    "gpu_milli",
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
    gpus: int  # the GPUs its workers run on
    # What it holds of them: a fractional job (Job.gpu_milli) counts its thousandths.
    gpu_share: float

    @classmethod
    def of(cls, row: tuple) -> Attempt:
        job_id, attempt, admitted_at, team_id, user_id, flavor_id, workers, gpw, milli = row
        share = workers * milli / 1000 if milli else float(workers * gpw)
        return cls(job_id, attempt, admitted_at, team_id, user_id, flavor_id, workers * gpw, share)

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
                gpu_seconds=self.gpu_share * seconds,
                outcome=outcome,
            )
            for hour, seconds in spans
        ]


def outcome_of(from_state: str, to_state: str) -> str:
    """How an attempt ended, from the transition that released its GPUs."""
    if to_state == JobState.PENDING:
        if from_state == JobState.PREEMPTING:
            return UsageOutcome.PREEMPTED
        return UsageOutcome.REQUEUED
    return str(to_state).lower()


def releases(from_state: str, to_state: str) -> bool:
    return from_state in HOLDING and to_state not in HOLDING


def starts(from_state: str, to_state: str) -> bool:
    """Whether a move starts an attempt (an admission)."""
    return from_state not in HOLDING and to_state in HOLDING


# The columns of the relation that the two statements below read, one row per attempt:
# job_id, attempt, admitted_at, team_id, user_id, flavor_id, gpus, gpu_share (what it holds of
# them: `Attempt.gpu_share`), from_state, end_at.
ATTEMPT_COLUMNS = (
    "job_id",
    "attempt",
    "admitted_at",
    "team_id",
    "user_id",
    "flavor_id",
    "gpus",
    "gpu_share",
    "from_state",
    "end_at",
)


def gpu_share_sql(workers: str, gpus_per_worker: str, gpu_milli: str) -> str:
    """SQL: `Attempt.gpu_share` of a job's columns."""
    return (
        f"(CASE WHEN {gpu_milli} > 0 THEN {workers} * {gpu_milli} / 1000.0 "
        f"ELSE {workers} * {gpus_per_worker} END)::float8"
    )


def _hour_sql(at: str) -> str:
    """SQL: `hour_of(at)`."""
    return f"(date_trunc('hour', {at} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')"


def _insert_sql() -> str:
    quote = connection.ops.quote_name
    column = {f.name: quote(f.column) for f in UsageRecord._meta.concrete_fields}
    names = ("job_id", "attempt", "hour", "team", "user", "flavor", "gpus", "gpu_seconds")
    listed = ", ".join(column[name] for name in (*names, "outcome", "idle_gpu_seconds"))
    return f"INSERT INTO {quote(UsageRecord._meta.db_table)} ({listed})"


def opened_rows_sql(source: str) -> str:
    """SQL: the open row of each attempt of `source` (ATTEMPT_COLUMNS) that a move started, as
    `Attempt.rows(admitted_at, OPEN)` gives it: zero GPU-seconds in the hour of admission."""
    return (
        f"{_insert_sql()} SELECT r.job_id, r.attempt, {_hour_sql('r.admitted_at')}, r.team_id, "
        f"r.user_id, r.flavor_id, r.gpus, 0, '{UsageOutcome.OPEN.value}', 0 FROM {source} r "
        "WHERE r.admitted_at IS NOT NULL ON CONFLICT DO NOTHING"
    )


def released_rows_sql(source: str, to_state: str) -> str:
    """SQL: the final rows of each attempt of `source` (ATTEMPT_COLUMNS) that a move to
    `to_state` released at `end_at`, as `Attempt.rows(end_at, outcome_of(...))` gives them (the
    seconds of each hour a difference of the same two clocks, as `split_by_hour`; at least the
    row of the hour of admission), upserted over the rows the minute's sweep wrote."""
    outcome = " ".join(
        f"WHEN '{state.value}' THEN '{outcome_of(state, to_state)}'" for state in sorted(HOLDING)
    )
    first = _hour_sql("r.admitted_at")
    seconds = (
        "extract(epoch FROM least(r.end_at, h.hour + interval '1 hour') "
        "- greatest(r.admitted_at, h.hour))"
    )
    quote = connection.ops.quote_name
    column = {f.name: quote(f.column) for f in UsageRecord._meta.concrete_fields}
    updated = ", ".join(
        f"{column[name]} = EXCLUDED.{column[name]}" for name in UPSERT["update_fields"]
    )
    unique = ", ".join(column[name] for name in UPSERT["unique_fields"])
    return (
        f"{_insert_sql()} SELECT r.job_id, r.attempt, h.hour, r.team_id, r.user_id, "
        f"r.flavor_id, r.gpus, r.gpu_share::float8 * greatest({seconds}, 0)::float8, "
        f"CASE r.from_state {outcome} END, 0 FROM {source} r "
        f"CROSS JOIN LATERAL generate_series({first}, greatest(r.end_at, r.admitted_at), "
        "interval '1 hour') AS h (hour) "
        f"WHERE r.admitted_at IS NOT NULL AND (h.hour < r.end_at OR h.hour = {first}) "
        f"ON CONFLICT ({unique}) DO UPDATE SET {updated}"
    )


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
