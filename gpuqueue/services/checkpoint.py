"""The checkpoint protocol's database side: acknowledgement and requeue."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from gpuqueue.models import Job, JobEvent
from gpuqueue.services.transitions import transition
from gpuqueue.states import JobState


def acknowledge_checkpoint(job: Job, location: str, actor: str) -> bool:
    """Record that a PREEMPTING job saved its state at `location`; False if it is not
    preempting (a late or repeated acknowledgement changes nothing)."""
    now = timezone.now()
    with transaction.atomic():
        updated = Job.objects.filter(
            pk=job.pk, state=JobState.PREEMPTING, checkpoint_acked_at__isnull=True
        ).update(checkpoint_location=location, checkpoint_acked_at=now)
        if updated:
            JobEvent.objects.create(
                job_id=job.pk, from_state=JobState.PREEMPTING, to_state=JobState.PREEMPTING,
                reason=f"checkpoint acknowledged: {location}", actor=actor,
                details={"location": location},
            )
    if updated:
        job.checkpoint_location, job.checkpoint_acked_at = location, now
    return bool(updated)


def requeue(job: Job, reason: str, actor: str = "cluster") -> bool:
    """Return a job that no longer holds GPUs to PENDING, keeping its submission time (and so
    its place in line) and its checkpoint location for the next attempt."""
    with transaction.atomic():
        return transition(
            job, JobState.PENDING, reason=reason, actor=actor,
            details={"placement": job.placement, "attempt": job.attempts},
            placement={}, admitted_at=None, started_at=None, checkpoint_requested_at=None,
            checkpoint_deadline=None, checkpoint_acked_at=None, message=reason,
        )
