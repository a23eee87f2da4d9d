"""Submitting a job: validate, write one row and its first event, nudge the cycle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
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
    "name",
    "image",
    "command",
    "env",
    "labels",
    "annotations",
    "workers",
    "gpus_per_worker",
    "priority",
    "preemptible",
    "checkpoint_grace_seconds",
    "max_runtime_seconds",
    "expected_runtime_seconds",
)


def previous_submission(user: Any, idempotency_key: str | None) -> Job | None:
    """The job an earlier request with this key created, if any (a pipeline's retry)."""
    if not idempotency_key:
        return None
    return (
        Job.objects.select_related("team", "flavor", "user")
        .filter(user=user, idempotency_key=idempotency_key)
        .first()
    )


def submit_job(
    user: Any,
    team: Team,
    flavor: Flavor,
    fields: dict[str, Any],
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
        raise SubmissionRefused(
            f"you are not a member of team {team.slug}", field="team", status=403
        )
    if idempotency_key:
        existing = Job.objects.filter(user=user, idempotency_key=idempotency_key).first()
        if existing is not None:
            return Submitted(existing, created=False)
    data = {key: value for key, value in fields.items() if key in JOB_FIELDS}
    data.setdefault("checkpoint_grace_seconds", settings.GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS)
    try:
        with transaction.atomic():
            job = Job.objects.create(
                team=team,
                user=user,
                flavor=flavor,
                idempotency_key=idempotency_key or None,
                state=JobState.PENDING,
                **data,
            )
            JobEvent.objects.create(
                job=job,
                from_state="",
                to_state=JobState.PENDING,
                reason="submitted",
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


NUDGE_DEBOUNCE_SECONDS = 1


def nudge_cycle() -> None:
    """Ask for an admission cycle soon; best effort, the beat schedule is the safety net.

    At most one nudge per second is sent: a burst of submissions needs one cycle, not one task
    per job (a queue of identical cycles only repeats work, and publishing costs each request
    a broker round trip).
    """
    import logging

    from django.core.cache import cache

    from gpuqueue.tasks import run_admission_cycle

    try:
        if not cache.add("nudge-cycle", 1, timeout=NUDGE_DEBOUNCE_SECONDS):
            return
        run_admission_cycle.apply_async(expires=30, retry=False)
    except Exception:  # noqa: BLE001 - a broker outage must not fail a submission
        logging.getLogger(__name__).warning("could not nudge the admission cycle", exc_info=True)


def check_fits(flavor: Flavor, gpus_per_worker: int) -> None:
    """Refuse a job that no node could ever run: a worker larger than the largest node of its
    flavor would wait forever. Node rows are the inventory; with none known yet the job is
    refused too, rather than accepted into a queue that cannot judge it."""
    from gpuqueue.services.inventory import largest_node_gpus_cached

    largest = largest_node_gpus_cached(flavor)
    if largest is None:
        raise SubmissionRefused(
            f"No node of flavor {flavor.name} is known yet, so a worker of {gpus_per_worker} "
            "GPUs cannot be checked; try again once the cluster's nodes are listed.",
            field="flavor",
        )
    if gpus_per_worker > largest:
        raise SubmissionRefused(
            f"A worker asks for {gpus_per_worker} {flavor.name} GPUs but the largest node of "
            f"that flavor has {largest}; use at most {largest} GPUs per worker (and more "
            "workers).",
            field="gpus_per_worker",
        )
