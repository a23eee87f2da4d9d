"""The checkpoint protocol's database side: acknowledgement and requeue."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from gpuqueue.core.states import CHECKPOINT_ACKNOWLEDGED, EVENT_KIND, JobState
from gpuqueue.models import Job, JobEvent
from gpuqueue.services.jobs.transitions import transition


def acknowledge_checkpoint(job: Job, location: str, actor: str) -> bool:
    """Record that a PREEMPTING job saved its state at `location`; False if it is not
    preempting (a late or repeated acknowledgement changes nothing)."""
    now = timezone.now()
    with transaction.atomic():
        updated = Job.objects.filter(
            pk=job.pk, state=JobState.PREEMPTING, checkpoint_acked_at__isnull=True
        ).update(checkpoint_location=location, checkpoint_acked_at=now)
        if updated:
            # An event within PREEMPTING, of a kind the state machine lists for it.
            JobEvent.objects.create(
                job_id=job.pk,
                from_state=JobState.PREEMPTING,
                to_state=JobState.PREEMPTING,
                reason=f"checkpoint acknowledged: {location}",
                actor=actor,
                details={EVENT_KIND: CHECKPOINT_ACKNOWLEDGED, "location": location},
            )
    if updated:
        job.checkpoint_location, job.checkpoint_acked_at = location, now
    return bool(updated)


def register_checkpoint(job: Job, location: str) -> bool:
    """Record a save that a running job made of its own accord (periodically, or on SIGTERM
    while its node is drained): the newest location wins, so the next attempt, whatever ends
    this one, resumes from it. False when the job is not running (a PREEMPTING job acknowledges
    instead). No event: a job may save every few minutes for weeks."""
    updated = Job.objects.filter(pk=job.pk, state__in=(JobState.ADMITTED, JobState.RUNNING)).update(
        checkpoint_location=location
    )
    if updated:
        job.checkpoint_location = location
    return bool(updated)


def requeue(job: Job, reason: str, actor: str = "cluster", **changes: Any) -> bool:
    """Return a job that no longer holds GPUs to PENDING, keeping its submission time (and so
    its place in line) and its checkpoint location for the next attempt; `changes` are more
    fields to set in the same update."""
    with transaction.atomic():
        return transition(
            job,
            JobState.PENDING,
            reason=reason,
            actor=actor,
            details={"placement": job.placement, "attempt": job.attempts},
            placement={},
            admitted_at=None,
            started_at=None,
            requeued_at=timezone.now(),
            checkpoint_requested_at=None,
            checkpoint_deadline=None,
            checkpoint_acked_at=None,
            message=reason,
            **changes,
        )


def issue_job_token(job: Job) -> str:
    """A secret valid for this job alone, for the workload to acknowledge its checkpoint with
    (`GPUQUEUE_JOB_TOKEN`); only its hash is kept. A new attempt gets a new token."""
    import secrets

    from teams.services import hash_secret

    secret = f"gqj_{job.pk}_{secrets.token_urlsafe(32)}"
    Job.objects.filter(pk=job.pk).update(checkpoint_token_hash=hash_secret(secret))
    job.checkpoint_token_hash = hash_secret(secret)
    return secret


def job_for_token(secret: str) -> Job | None:
    """The job a per-job token belongs to, or None."""
    import hmac

    from teams.services import hash_secret

    parts = secret.split("_", 2)
    if len(parts) != 3 or parts[0] != "gqj" or not (parts[1].isascii() and parts[1].isdigit()):
        return None
    if len(parts[1]) > 19 or int(parts[1]) >= 2**63:  # past a bigint: no job of ours
        return None
    job = Job.objects.filter(pk=int(parts[1])).first()
    if job is None or not job.checkpoint_token_hash:
        return None
    if not hmac.compare_digest(job.checkpoint_token_hash, hash_secret(secret)):
        return None
    return job
