"""The cycle's admissions, written in bulk: a wave of thousands of admitted jobs is two
statements' worth, not two per job.

One UPDATE guarded by the state the cycle saw (PENDING, `pending.update_still_pending`), so a
job cancelled since the snapshot is left alone exactly as `transition` leaves it, and INSERTs
of the events of the jobs it moved, a thousand a statement, and of their first rows in the
GPU-hours ledger. The cycle's transaction holds them all, so a job is never ADMITTED without
its event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuqueue.core.states import JobState, check_transition
from gpuqueue.models import JobEvent
from gpuqueue.services.pending import SHOWN_WHILE_PENDING, update_still_pending
from gpuqueue.services.usage_ledger import record_admissions

CHUNK = 1000  # events a statement


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
    admitted = [a.job_id for a in admissions if a.job_id in moved]
    record_admissions(admitted)  # each attempt's first row in the GPU-hours ledger
    return admitted
