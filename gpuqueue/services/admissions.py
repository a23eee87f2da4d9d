"""The cycle's admissions, written in bulk: a wave of thousands of admitted jobs is a few
statements, not two per job.

Each chunk of a thousand jobs is one UPDATE … FROM (VALUES …) guarded by the state the cycle
saw (PENDING), so a job cancelled since the snapshot is left alone exactly as `transition`
leaves it, and one INSERT of the events of the jobs it moved. The cycle's transaction holds
both, so a job is never ADMITTED without its event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from gpuqueue.core.states import JobState, check_transition
from gpuqueue.models import Job, JobEvent

CHUNK = 1000


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
    moved: set[int] = set()
    for start in range(0, len(admissions), CHUNK):
        moved |= _admit_chunk(admissions[start : start + CHUNK], now)
    events = [
        JobEvent(
            job_id=a.job_id,
            from_state=JobState.PENDING,
            to_state=JobState.ADMITTED,
            reason="borrowing idle GPUs" if a.borrowed else "within fair share",
            actor=actor,
            details={"placement": a.placement, "borrowed": a.borrowed},
        )
        for a in admissions
        if a.job_id in moved
    ]
    JobEvent.objects.bulk_create(events, batch_size=CHUNK)
    return [a.job_id for a in admissions if a.job_id in moved]


def _admit_chunk(chunk: Sequence[Admitted], now: datetime) -> set[int]:
    quote = connection.ops.quote_name
    field = Job._meta.get_field
    id_field, placement_field = field("id"), field("placement")
    row_sql = (
        f"(%s::{id_field.cast_db_type(connection)}, %s::{placement_field.cast_db_type(connection)})"
    )
    params: list[object] = [field("admitted_at").get_db_prep_save(now, connection)]
    for a in chunk:
        params.append(a.job_id)
        params.append(placement_field.get_db_prep_save(a.placement, connection))
    cleared = ("pending_reason", "queue_position", "cluster_position", "estimated_start")
    sets = ", ".join(
        [
            f"{quote('state')} = %s",
            f"{quote(field('admitted_at').column)} = %s",
            f"{quote(placement_field.column)} = {quote('v')}.{quote('placement')}",
            f"{quote('attempts')} = {quote('j')}.{quote('attempts')} + 1",
            *(f"{quote(field(name).column)} = NULL" for name in (*cleared, "started_at")),
        ]
    )
    sql = (
        f"UPDATE {quote(Job._meta.db_table)} {quote('j')} SET {sets} "
        f"FROM (VALUES {', '.join([row_sql] * len(chunk))}) "
        f"AS {quote('v')} ({quote('id')}, {quote('placement')}) "
        f"WHERE {quote('j')}.{quote('id')} = {quote('v')}.{quote('id')} "
        f"AND {quote('j')}.{quote('state')} = %s "
        f"RETURNING {quote('j')}.{quote('id')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [JobState.ADMITTED.value, *params, JobState.PENDING.value])
        return {row[0] for row in cursor.fetchall()}
