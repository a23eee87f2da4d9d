"""Cancelling a job: by its owner, a team admin or a site admin."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from gpuqueue.core.states import HOLDING, InvalidTransition, JobState
from gpuqueue.models import Job
from gpuqueue.services.jobs.transitions import transition
from teams.models import Membership, Role


class CancelRefused(Exception):
    pass


def may_cancel(user: Any, job: Job) -> bool:
    return may_cancel_owned(user, team_id=job.team_id, owner_id=job.user_id)


def may_cancel_owned(user: Any, *, team_id: int, owner_id: int) -> bool:
    """Whether `user` may cancel what `owner_id` submitted to the team (a job, an array's
    tasks): the submitter, an admin of the team, or a site admin."""
    if user.is_superuser or owner_id == user.pk:
        return True
    return Membership.objects.filter(team_id=team_id, user=user, role=Role.ADMIN).exists()


def cancel_job(user: Any, job: Job, reason: str = "cancelled") -> Job:
    """Cancel `job`; a job holding GPUs is stopped on the cluster after commit.

    Raises CancelRefused when the user may not, and InvalidTransition when the job is final.
    """
    if not may_cancel(user, job):
        raise CancelRefused("only the job's owner, a team admin or a site admin may cancel it")
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        was_holding = job.state in HOLDING
        if job.is_final:
            raise InvalidTransition(job.pk, job.state, JobState.CANCELLED)
        transition(
            job,
            JobState.CANCELLED,
            reason=reason,
            actor=f"user:{user.get_username()}",
            finished_at=timezone.now(),
        )
        if was_holding:
            job_id, attempt = job.pk, job.attempts
            transaction.on_commit(lambda: stop_on_cluster(job_id, attempt))
    return job


def stop_on_cluster(job_id: int, attempt: int) -> None:
    import logging

    from gpuqueue.cluster import get_backend

    try:
        get_backend().stop(job_id, attempt)
    except Exception:  # noqa: BLE001 - the cluster sync stops orphans it finds later
        logging.getLogger(__name__).warning("could not stop job %s yet", job_id, exc_info=True)
