"""Submitting a job: validate, write one row and its first event, nudge the cycle."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from gpuqueue.celery import app as celery_app
from gpuqueue.core import caches
from gpuqueue.core import redis as api_redis
from gpuqueue.core.outage import redis_failed
from gpuqueue.core.states import JobState
from gpuqueue.models import Flavor, Job, JobEvent
from gpuqueue.scheduler.model import whole_workers
from gpuqueue.services.cluster.inventory import flavor_size_cached
from gpuqueue.services.jobs import submission_sql
from teams.models import Team

log = logging.getLogger(__name__)


class SubmissionRefused(Exception):
    """The caller may not submit this job; `field` names the input at fault."""

    def __init__(self, message: str, *, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


TEAM_REQUIRED = "Required: you belong to several teams (or none)."


class TeamRequired(SubmissionRefused):
    """A submission without a team from someone who does not have exactly one."""

    def __init__(self) -> None:
        super().__init__(TEAM_REQUIRED, field="team")


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
    "gpu_milli",
    "gpu_models",
    "topology_level",
    "topology_required",
    "priority",
    "preemptible",
    "checkpoint_grace_seconds",
    "max_runtime_seconds",
    "expected_runtime_seconds",
    "cpu_millicores",
    "cpu_limit_millicores",
    "memory_mib",
    "memory_limit_mib",
    "shm_mib",
    "volumes",
    "image_pull_secrets",
    "env_from_secrets",
    "priority_class",
    "service_account",
)


def job_columns(fields: dict[str, Any]) -> dict[str, Any]:
    """The submission's fields that are the job's own columns, with the default grace."""
    data = {key: value for key, value in fields.items() if key in JOB_FIELDS}
    data.setdefault("checkpoint_grace_seconds", settings.GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS)
    return data


def previous_submission(user: Any, idempotency_key: str | None) -> Job | None:
    """The job an earlier request with this key created, if any (a pipeline's retry)."""
    if not idempotency_key:
        return None
    jobs = Job.objects.select_related("team", "flavor", "user")
    return jobs.filter(user=user, idempotency_key=idempotency_key).first()


def teams_for_submission(user: Any, slug: str | None = None, *, limit: int = 2) -> list[Team]:
    """Teams `user` may submit to (every team for a site admin), or the one named `slug`."""
    teams = Team.objects.all() if user.is_superuser else Team.objects.filter(memberships__user=user)
    if slug is not None:
        teams = teams.filter(slug=slug)
    return list(teams.order_by("slug")[:limit])


def only_team(user: Any) -> Team:
    """The one team `user` may submit to; `TeamRequired` when there are none or several."""
    teams = teams_for_submission(user)
    if len(teams) != 1:
        raise TeamRequired()
    return teams[0]


# The team and the flavor a submission names, kept per process (`gpuqueue.core.caches`):
# read through the ORM, the two lookups cost a quarter more CPU per submission
# (benchmarks/api_load.py). Any change to a team, membership or flavor renews the epoch;
# should a removal land between the lookup and the insert, the insert checks membership
# again, atomically, and a deleted flavor fails its foreign key.
_teams: caches.Kept[tuple[Any, ...], Team] = caches.Kept()
_flavors: caches.Kept[str, Flavor] = caches.Kept()


def submittable_team(user: Any, slug: str) -> Team | None:
    """The team named `slug` if `user` may submit to it."""

    def load() -> Team | None:
        found = teams_for_submission(user, slug, limit=1)
        return found[0] if found else None

    return caches.read_through(_teams, (user.pk, bool(user.is_superuser), slug), load)


def flavor_for_submission(name: str) -> Flavor | None:
    """The flavor named `name`."""
    return caches.read_through(_flavors, name, lambda: Flavor.objects.filter(name=name).first())


def submit_job(
    user: Any,
    team: Team | None,
    flavor: Flavor,
    fields: dict[str, Any],
    idempotency_key: str | None = None,
    idempotency_body: str | None = None,
) -> Submitted:
    """Create a PENDING job for `user` in `team` (None: the only team `user` may submit to).

    1. The user must belong to the team (site admins may submit anywhere).
    2. A repeated idempotency key from the same user returns the first job, even when the
       retries race: the unique index decides (the insert does nothing on a conflict), and
       the loser reads the winner's row. A new key, almost every submission, costs no probe.
       (Callers answer a retry whose body no longer validates with `previous_submission`.)
    3. The job row and its first event are written by one statement (`submission_sql`), which
       inserts nothing unless the user is a member: one round trip and one commit. Without a
       team, the same statement takes the user's teams (every team for a site admin) and
       inserts nothing unless there is exactly one: no lookup beforehand, and nothing about
       memberships is kept between submissions.
    4. After commit the admission cycle is nudged; if Redis is down the periodic cycle still
       picks the job up, so a lost nudge loses nothing.
    """
    data = job_columns(fields)
    job = Job(
        team=team,
        user=user,
        flavor=flavor,
        idempotency_key=idempotency_key or None,
        idempotency_body=idempotency_body if idempotency_key else None,
        state=JobState.PENDING,
        **data,
    )
    event = JobEvent(
        job=job,
        from_state="",
        to_state=JobState.PENDING,
        reason="submitted",
        actor=f"user:{user.get_username()}",
    )
    try:
        # Inside a caller's transaction a savepoint keeps a duplicate key from spoiling it;
        # alone, the one statement is its own transaction.
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            inserted = submission_sql.insert(job, event, site_admin=bool(user.is_superuser))
            if inserted is not None:
                transaction.on_commit(nudge_cycle)
    except IntegrityError:
        if not Flavor.objects.filter(pk=flavor.pk).exists():  # deleted since it was looked up
            raise SubmissionRefused(f"Unknown flavor {flavor.name}.", field="flavor") from None
        raise
    if inserted is None:
        # Nothing inserted: the key was used before (the earlier job stands), the user is not
        # a member, or (without a team) the user does not have exactly one team.
        existing = previous_submission(user, idempotency_key)
        if existing is not None:
            return Submitted(existing, created=False)
        if team is None:
            # The user's teams changed between the two statements: take the one there is now.
            return submit_job(
                user, only_team(user), flavor, fields, idempotency_key, idempotency_body
            )
        raise SubmissionRefused(
            f"you are not a member of team {team.slug}", field="team", status=403
        )
    job.pk, taken = inserted
    if taken is not None:
        job.team = taken
    # A job just submitted mirrors no Kubernetes object (JobSource) and has not been explained
    # (Standing): told to the ORM, so that the answer that reads it back costs no query for it.
    Job.source.related.set_cached_value(job, None)
    Job.standing.related.set_cached_value(job, None)
    event.job_id = job.pk
    return Submitted(job, created=True)


NUDGE_DEBOUNCE_SECONDS = 1
NUDGE_KEY = "gpuqueue:nudge-cycle"


def nudge_cycle() -> None:
    """Ask for an admission cycle soon; best effort, the beat schedule is the safety net.

    At most one nudge per second is sent, whichever process asks (a key set in Redis only if
    absent): a burst of submissions needs one cycle, not one task per job, and a queue of
    identical cycles only repeats work.
    """
    try:
        if api_redis.client().set(NUDGE_KEY, 1, nx=True, ex=NUDGE_DEBOUNCE_SECONDS):
            # By its pinned name: services do not import the tasks, which import services.
            celery_app.send_task("gpuqueue.run_admission_cycle", expires=30, retry=False)
    except Exception as error:  # noqa: BLE001 - a broker outage must not fail a submission
        redis_failed(log, "nudging the admission cycle", error)


def check_fits(flavor: Flavor, workers: int, gpus_per_worker: int) -> None:
    """Refuse a job that no node could ever run: a worker larger than the largest node of its
    flavor, a gang larger than all its nodes together, or more workers than its nodes hold
    when empty (a worker runs on one node) would wait forever. Node rows are
    the inventory; with none known yet the job is refused too, rather than accepted into a
    queue that cannot judge it."""
    size = flavor_size_cached(flavor)
    if size is None:
        raise SubmissionRefused(
            f"No node of flavor {flavor.name} is known yet, so a worker of {gpus_per_worker} "
            "GPUs cannot be checked; try again once the cluster's nodes are listed.",
            field="flavor",
        )
    largest = size.largest_node
    if gpus_per_worker > largest:
        raise SubmissionRefused(
            f"A worker asks for {gpus_per_worker} {flavor.name} GPUs but the largest node of "
            f"that flavor has {largest}; use at most {largest} GPUs per worker (and more "
            "workers).",
            field="gpus_per_worker",
        )
    most = whole_workers(size.sizes, gpus_per_worker)  # a worker runs on one node
    if workers * gpus_per_worker > size.total:
        raise SubmissionRefused(
            f"The job asks for {workers * gpus_per_worker} {flavor.name} GPUs "
            f"({workers} × {gpus_per_worker}) but the cluster has {size.total} {flavor.name} "
            f"GPUs in all; use at most {most} workers of "
            f"{gpus_per_worker}.",
            field="workers",
        )
    if workers > most:
        layout = ", ".join(
            f"{size.sizes[s]} node{'s' if size.sizes[s] > 1 else ''} of {s} GPUs"
            for s in sorted(size.sizes, reverse=True)
        )
        raise SubmissionRefused(
            f"The job asks for {workers} workers of {gpus_per_worker} {flavor.name} GPUs, and a "
            f"worker runs on one node: its nodes ({layout}) hold at most "
            f"{most} such workers; use at most {most} workers of {gpus_per_worker}, or smaller "
            "workers.",
            field="workers",
        )
