"""Submitting a job: validate, write one row and its first event, nudge the cycle."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache
from typing import Any

from cachetools import TTLCache
from django.conf import settings
from django.core.cache import cache as shared_cache  # Redis: every process sees it
from django.db import IntegrityError, connection, transaction

from gpuqueue.celery import app as celery_app
from gpuqueue.core import sql_rows
from gpuqueue.core.states import JobState
from gpuqueue.models import Flavor, Job, JobEvent
from teams.models import Membership, Team

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
    # Almost every key is new: probe the unique index for a primary key (one cursor query) and
    # load the whole job through the ORM only for a retry.
    with connection.cursor() as cursor:
        cursor.execute(_previous_submission_sql(), [user.pk, idempotency_key])
        row = cursor.fetchone()
    if row is None:
        return None
    return Job.objects.select_related("team", "flavor", "user").get(pk=row[0])


def teams_for_submission(user: Any, slug: str | None = None, *, limit: int = 2) -> list[Team]:
    """Teams `user` may submit to (every team for a site admin), or the one named `slug`.

    A cursor query: it runs on every API submission (see `gpuqueue.core.sql_rows`)."""
    params: list[Any] = [] if slug is None else [slug]
    if not user.is_superuser:
        params.append(user.pk)
    cols = sql_rows.columns(Team, "t")
    with connection.cursor() as cursor:
        cursor.execute(_teams_sql(slug is not None, not user.is_superuser, limit), params)
        return [sql_rows.instance(Team, cols, row) for row in cursor.fetchall()]


# Per process, a few seconds: the names a submission resolves. Only hits are kept, so a new
# team, flavor or membership works at once. A stale hit is harmless: membership is checked
# again, atomically, by the insert's guard (a removed member is refused with 403 instead of
# "unknown team"), and a flavor deleted meanwhile fails the insert's foreign key.
LOOKUP_TTL_SECONDS = 5.0
_lookups: TTLCache[tuple[Any, ...], Any] = TTLCache(maxsize=4096, ttl=LOOKUP_TTL_SECONDS)
_lookups_lock = threading.Lock()


def submittable_team(user: Any, slug: str) -> Team | None:
    """The team named `slug` if `user` may submit to it (cached; see `_lookups`)."""

    def load() -> Team | None:
        found = teams_for_submission(user, slug, limit=1)
        return found[0] if found else None

    return _looked_up(("team", user.pk, bool(user.is_superuser), slug), load)


def flavor_for_submission(name: str) -> Flavor | None:
    """The flavor named `name` (cached; see `_lookups`)."""
    return _looked_up(("flavor", name), lambda: flavor_named(name))


def _looked_up(key: tuple[Any, ...], load: Any) -> Any:
    with _lookups_lock:
        found = _lookups.get(key)
    if found is None:
        found = load()
        if found is not None:
            with _lookups_lock:
                _lookups[key] = found
    return found


def forget_lookups() -> None:
    with _lookups_lock:
        _lookups.clear()


def flavor_named(name: str) -> Flavor | None:
    cols = sql_rows.columns(Flavor, "f")
    with connection.cursor() as cursor:
        cursor.execute(_flavor_sql(), [name])
        row = cursor.fetchone()
    return None if row is None else sql_rows.instance(Flavor, cols, row)


def submit_job(
    user: Any,
    team: Team | None,
    flavor: Flavor,
    fields: dict[str, Any],
    idempotency_key: str | None = None,
) -> Submitted:
    """Create a PENDING job for `user` in `team` (None: the only team `user` may submit to).

    1. The user must belong to the team (site admins may submit anywhere).
    2. A repeated idempotency key from the same user returns the first job, even when the
       retries race: the unique index decides (the insert does nothing on a conflict), and
       the loser reads the winner's row. A new key, almost every submission, costs no probe.
       (Callers answer a retry whose body no longer validates with `previous_submission`.)
    3. The job row and its first event are written by one statement (`_insert_sql`), which
       inserts nothing unless the user is a member: one round trip and one commit. Without a
       team, the same statement takes the user's teams (every team for a site admin) and
       inserts nothing unless there is exactly one: no lookup beforehand, and nothing about
       memberships is kept between submissions.
    4. After commit the admission cycle is nudged; if Redis is down the periodic cycle still
       picks the job up, so a lost nudge loses nothing.
    """
    data = {key: value for key, value in fields.items() if key in JOB_FIELDS}
    data.setdefault("checkpoint_grace_seconds", settings.GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS)
    job = Job(
        team=team,
        user=user,
        flavor=flavor,
        idempotency_key=idempotency_key or None,
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
    if team is None:
        params = [
            bool(user.is_superuser),
            user.pk,
            *sql_rows.insert_params(job, skip=("team",)),
            *sql_rows.insert_params(event, skip=("job",)),
        ]
    else:
        params = [
            *sql_rows.insert_params(job),
            bool(user.is_superuser),
            team.pk,
            user.pk,
            *sql_rows.insert_params(event, skip=("job",)),
        ]
    try:
        # Inside a caller's transaction a savepoint keeps a duplicate key from spoiling it;
        # alone, the one statement is its own transaction.
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            with connection.cursor() as cursor:
                cursor.execute(_insert_sql(team is None), params)
                row = cursor.fetchone()
            if row is not None:
                transaction.on_commit(nudge_cycle)
    except IntegrityError:
        if not Flavor.objects.filter(pk=flavor.pk).exists():  # deleted since it was looked up
            forget_lookups()
            raise SubmissionRefused(f"Unknown flavor {flavor.name}.", field="flavor") from None
        raise
    if row is None:
        # Nothing inserted: the key was used before (the earlier job stands), the user is not
        # a member, or (without a team) the user does not have exactly one team.
        existing = previous_submission(user, idempotency_key)
        if existing is not None:
            return Submitted(existing, created=False)
        if team is None:
            teams = teams_for_submission(user)
            if len(teams) != 1:
                raise TeamRequired()
            # The user's teams changed between the two statements: take the one there is now.
            return submit_job(user, teams[0], flavor, fields, idempotency_key)
        raise SubmissionRefused(
            f"you are not a member of team {team.slug}", field="team", status=403
        )
    job.pk = row[0]
    if team is None:
        job.team = sql_rows.instance(Team, sql_rows.columns(Team, "t"), row[1:])
    event.job_id = job.pk
    return Submitted(job, created=True)


# The statements are built once per process (`cache`): through Django's connection proxy even
# quoting a name costs a thread-local lookup.


def _q(name: str) -> str:
    return str(connection.ops.quote_name(name))


@cache
def _previous_submission_sql() -> str:
    field = Job._meta.get_field
    return (
        f"SELECT {_q('id')} FROM {_q(Job._meta.db_table)} "
        f"WHERE {_q(field('user').column)} = %s AND {_q(field('idempotency_key').column)} = %s"
    )


@cache
def _teams_sql(by_slug: bool, members_only: bool, limit: int) -> str:
    where = []
    if by_slug:
        where.append(f"{_q('t')}.{_q('slug')} = %s")
    if members_only:
        where.append(_membership_exists(f"{_q('t')}.{_q('id')}"))
    sql = f"SELECT {sql_rows.columns(Team, 't').select} FROM {_q(Team._meta.db_table)} {_q('t')}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + f" ORDER BY {_q('t')}.{_q('slug')} LIMIT {int(limit)}"


@cache
def _flavor_sql() -> str:
    return (
        f"SELECT {sql_rows.columns(Flavor, 'f').select} FROM {_q(Flavor._meta.db_table)} "
        f"{_q('f')} WHERE {_q('f')}.{_q('name')} = %s"
    )


def _membership_exists(team_column: str) -> str:
    """SQL: the user whose id is the parameter `%s` is a member of the team `team_column`."""
    m = Membership._meta
    return (
        f"EXISTS (SELECT 1 FROM {_q(m.db_table)} {_q('m')} "
        f"WHERE {_q('m')}.{_q(m.get_field('team').column)} = {team_column} "
        f"AND {_q('m')}.{_q(m.get_field('user').column)} = %s)"
    )


@cache
def _insert_sql(implicit_team: bool) -> str:
    """INSERT the job only if `%s` (the user is a site admin) or the user (`%s`, `%s`: team id,
    user id) is a member of the team, and its idempotency key is new; INSERT its first event
    from the job's new id; return the id (no row: a used key, or not a member).

    With `implicit_team` the statement starts with `%s` (the user is a site admin) and `%s`
    (the user's id), and the job's team is the one team the user may submit to (every team
    for a site admin; no row when there are none or several); it returns the id and that
    team's columns."""
    job, event = sql_rows.insert_columns(Job), sql_rows.insert_columns(JobEvent)
    event_values = ", ".join(
        f"{_q('new_job')}.{_q('id')}" if f.name == "job" else cast
        for f, cast in zip(event.fields, event.casts, strict=True)
    )
    team_table = _q(Team._meta.db_table)
    team_column = _q(Job._meta.get_field("team").column)
    if implicit_team:
        # One row (the team's id) only when exactly one team qualifies.
        team_id = f"{_q('t')}.{_q('id')}"
        only_team = (
            f"{_q('only_team')} AS (SELECT min({team_id}) AS {_q('id')} "
            f"FROM {team_table} {_q('t')} WHERE %s OR {_membership_exists(team_id)} "
            f"HAVING count(*) = 1), "
        )
        job_values = ", ".join(
            f"{_q('only_team')}.{_q('id')}" if f.name == "team" else cast
            for f, cast in zip(job.fields, job.casts, strict=True)
        )
        insert_job = (
            f"INSERT INTO {job.table} {job.column_list} SELECT {job_values} "
            f"FROM {_q('only_team')} ON CONFLICT DO NOTHING "
            f"RETURNING {_q('id')}, {team_column}"
        )
        result = (
            f"SELECT {_q('new_job')}.{_q('id')}, {sql_rows.columns(Team, 't').select} "
            f"FROM {_q('new_job')} JOIN {team_table} {_q('t')} "
            f"ON {_q('t')}.{_q('id')} = {_q('new_job')}.{team_column}"
        )
    else:
        only_team = ""
        insert_job = (
            f"INSERT INTO {job.table} {job.column_list} SELECT {', '.join(job.casts)} "
            f"WHERE %s OR {_membership_exists('%s')} ON CONFLICT DO NOTHING "
            f"RETURNING {_q('id')}"
        )
        result = f"SELECT {_q('id')} FROM {_q('new_job')}"
    return (
        f"WITH {only_team}{_q('new_job')} AS ({insert_job}), "
        f"{_q('new_event')} AS ("
        f"INSERT INTO {event.table} {event.column_list} SELECT {event_values} "
        f"FROM {_q('new_job')}) "
        f"{result}"
    )


NUDGE_DEBOUNCE_SECONDS = 1
_last_nudge = float("-inf")  # time.monotonic() of this process's last nudge


def nudge_cycle() -> None:
    """Ask for an admission cycle soon; best effort, the beat schedule is the safety net.

    At most one nudge per second is sent: a burst of submissions needs one cycle, not one task
    per job (a queue of identical cycles only repeats work, and publishing costs each request
    a broker round trip). Each process first checks its own clock, so that under a burst only
    its first submission each second pays the shared Redis check.
    """
    global _last_nudge
    now = time.monotonic()
    if now - _last_nudge < NUDGE_DEBOUNCE_SECONDS:
        return
    _last_nudge = now
    try:
        if not shared_cache.add("nudge-cycle", 1, timeout=NUDGE_DEBOUNCE_SECONDS):
            return
        # By its pinned name: services do not import the tasks, which import services.
        celery_app.send_task("gpuqueue.run_admission_cycle", expires=30, retry=False)
    except Exception:  # noqa: BLE001 - a broker outage must not fail a submission
        log.warning("could not nudge the admission cycle", exc_info=True)


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
