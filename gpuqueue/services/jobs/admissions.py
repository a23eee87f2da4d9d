"""The cycle's admissions, written in bulk: a wave of thousands of admitted jobs is two
statements' worth, not two per job.

One UPDATE guarded by the state the cycle saw (PENDING, `pending.update_still_pending`), so a
job cancelled since the snapshot is left alone exactly as `transition` leaves it, one INSERT of
the events of the jobs it moved and one of their first rows in the GPU-hours ledger, each from
arrays bound as single parameters (Django's `bulk_create` spent 0.3 ms a row preparing
values). The cycle's transaction holds them all, so a job is never ADMITTED without its
event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.utils import timezone

from gpuqueue.core.states import JobState, check_transition
from gpuqueue.models import JobEvent
from gpuqueue.services.accounting.usage_ledger import record_admissions
from gpuqueue.services.jobs.column_arrays import array_param, array_sql
from gpuqueue.services.jobs.pending import SHOWN_WHILE_PENDING, update_still_pending


@dataclass(frozen=True)
class Admitted:
    job_id: int
    placement: dict[str, int]  # node -> workers
    borrowed: bool


def admit_all(admissions: Sequence[Admitted], now: datetime, actor: str) -> list[int]:
    """Move each job still PENDING to ADMITTED with its placement; returns the ids moved, in
    the order given."""
    if not admissions:
        return []
    check_transition(None, JobState.PENDING, JobState.ADMITTED)
    moved = set(
        update_still_pending(
            ("state", "admitted_at", "placement"),
            [(a.job_id, JobState.ADMITTED.value, now, a.placement) for a in admissions],
            cleared=(*SHOWN_WHILE_PENDING, "started_at"),
            counted=("attempts",),
        )
    )
    written = [a for a in admissions if a.job_id in moved]
    _insert_events(written, actor)
    admitted = [a.job_id for a in written]
    record_admissions(admitted)  # each attempt's first row in the GPU-hours ledger
    return admitted


def _insert_events(admissions: Sequence[Admitted], actor: str) -> None:
    """Each admission's event, as `transition` would write it, in one INSERT."""
    quote = connection.ops.quote_name
    field = JobEvent._meta.get_field
    columns = ", ".join(
        quote(field(name).column)
        for name in ("job", "at", "from_state", "to_state", "reason", "actor", "details")
    )
    details = field("details")
    sql = (
        f"INSERT INTO {quote(JobEvent._meta.db_table)} ({columns}) "
        f"SELECT v.id, %s, %s, %s, CASE WHEN v.borrowed THEN %s ELSE %s END, %s, v.details "
        f"FROM unnest(%b::bigint[], %b::boolean[], {array_sql(details)}) "
        "AS v (id, borrowed, details)"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            [
                timezone.now(),  # as `auto_now_add` would
                str(JobState.PENDING),
                str(JobState.ADMITTED),
                "borrowing idle GPUs",
                "within fair share",
                actor,
                [a.job_id for a in admissions],
                [a.borrowed for a in admissions],
                array_param(
                    details,
                    [{"placement": a.placement, "borrowed": a.borrowed} for a in admissions],
                ),
            ],
        )
