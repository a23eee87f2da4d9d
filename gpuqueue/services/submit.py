"""Submitting a job: validate, write one row and its first event, nudge the cycle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from gpuqueue.models import Flavor, Job, JobEvent
from gpuqueue.states import JobState
from teams.models import Team


class SubmissionRefused(Exception):
    """The caller may not submit this job; `field` names the input at fault."""

    def __init__(self, message: str, *, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


@dataclass(frozen=True)
class Submitted:
    job: Job
    created: bool  # False when an earlier submission with the same idempotency key exists


JOB_FIELDS = (
    "name", "image", "command", "env", "labels", "annotations", "workers", "gpus_per_worker",
    "priority", "preemptible", "checkpoint_grace_seconds", "max_runtime_seconds",
    "expected_runtime_seconds",
)


def submit_job(
    user: Any, team: Team, flavor: Flavor, fields: dict[str, Any],
    idempotency_key: str | None = None,
) -> Submitted:
    """Create a PENDING job for `user` in `team`.

    1. The user must belong to the team (site admins may submit anywhere).
    2. A repeated idempotency key from the same user returns the first job, even when the
       retries race: the unique constraint decides, and the loser reads the winner's row.
    3. The job row and its first event are written in one transaction.
    4. After commit the admission cycle is nudged; if Redis is down the periodic cycle still
       picks the job up, so a lost nudge loses nothing.
    """
    if not user.is_superuser and not team.memberships.filter(user=user).exists():
        raise SubmissionRefused(f"you are not a member of team {team.slug}", field="team", status=403)
    if idempotency_key:
        existing = Job.objects.filter(user=user, idempotency_key=idempotency_key).first()
        if existing is not None:
            return Submitted(existing, created=False)
    data = {key: value for key, value in fields.items() if key in JOB_FIELDS}
    try:
        with transaction.atomic():
            job = Job.objects.create(
                team=team, user=user, flavor=flavor, idempotency_key=idempotency_key or None,
                state=JobState.PENDING, **data,
            )
            JobEvent.objects.create(
                job=job, from_state="", to_state=JobState.PENDING, reason="submitted",
                actor=f"user:{user.get_username()}",
            )
            transaction.on_commit(nudge_cycle)
    except IntegrityError:
        if idempotency_key:
            existing = Job.objects.filter(user=user, idempotency_key=idempotency_key).first()
            if existing is not None:
                return Submitted(existing, created=False)
        raise
    return Submitted(job, created=True)


def nudge_cycle() -> None:
    """Ask for an admission cycle soon; best effort, the beat schedule is the safety net."""
    import logging

    from gpuqueue.tasks import run_admission_cycle

    try:
        run_admission_cycle.apply_async(expires=30, retry=False)
    except Exception:  # noqa: BLE001 - a broker outage must not fail a submission
        logging.getLogger(__name__).warning("could not nudge the admission cycle", exc_info=True)
