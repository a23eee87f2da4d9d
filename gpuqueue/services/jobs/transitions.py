"""Move a job through the state machine, recording every move as a JobEvent."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from gpuqueue.core.states import JobState, check_transition
from gpuqueue.models import Job, JobEvent
from gpuqueue.services.accounting.usage_ledger import lock_attempt, record_release, releases


def transition(
    job: Job,
    to: JobState,
    *,
    reason: str,
    actor: str,
    details: dict[str, Any] | None = None,
    **changes: Any,
) -> bool:
    """Move `job` from the state it was read in to `to`, with `changes` to its fields.

    Raises InvalidTransition when the state machine forbids the move. Returns False, changing
    nothing, when another process moved the job first (the update is filtered on the state the
    caller saw, so two racing cycles cannot both admit, requeue or finish one job).
    """
    check_transition(job.pk, job.state, to)
    if job.state == JobState.PREEMPTING and to != JobState.PREEMPTING:
        changes.setdefault("preempted_for", None)  # preempted for no one any more
    # No savepoint: the update and its event only need to commit together, and a caller that
    # moves many jobs in one transaction (the cycle) should not pay a savepoint for each.
    with transaction.atomic(savepoint=False):
        # A move that releases GPUs closes the attempt in the GPU-hours ledger, in this
        # transaction (services/accounting/usage_ledger.py).
        attempt = lock_attempt(job.pk, job.state) if releases(job.state, to) else None
        updated = Job.objects.filter(pk=job.pk, state=job.state).update(state=to, **changes)
        if not updated:
            return False
        event = JobEvent.objects.create(
            job_id=job.pk,
            from_state=job.state,
            to_state=to,
            reason=reason,
            actor=actor,
            details=details or {},
        )
        if attempt is not None:
            record_release(attempt, job.state, to, event.at)
    job.state = to
    for field, value in changes.items():
        setattr(job, field, value)
    return True
