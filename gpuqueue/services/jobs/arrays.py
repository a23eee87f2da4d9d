"""Job arrays: one submission, N tasks that are ordinary jobs of the same user.

Each task carries `GPUQUEUE_ARRAY_ID`, `GPUQUEUE_ARRAY_INDEX`, `GPUQUEUE_ARRAY_COUNT` and, when
the submission gave values, `GPUQUEUE_ARRAY_VALUE` in its environment (written into the job's
`env`, so both cluster backends pass them on as they pass any variable). `%K` is kept by the
cycle's hold phase (`hold_over_limit`): of an array's PENDING tasks only the first K less those
holding GPUs are offered to the engine, the rest are held with a reason, so the engine (and its
snapshot) never sees more than K tasks of an array at once however long the array is.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Count
from django.utils import timezone

from gpuqueue.core.reason_text import ARRAY_LIMIT
from gpuqueue.core.states import FINAL, HOLDING, JobState
from gpuqueue.models import Flavor, Job, JobArray, JobDependency, JobEvent, JobHold, Standing
from gpuqueue.services.jobs import submission_sql as sql
from gpuqueue.services.jobs.array_spec import ArraySpec
from gpuqueue.services.jobs.cancel import may_cancel_owned, stop_on_cluster
from gpuqueue.services.jobs.dependencies import Dependencies, initial_reason
from gpuqueue.services.jobs.submit import (
    SubmissionRefused,
    job_columns,
    nudge_cycle,
    only_team,
)
from gpuqueue.services.jobs.transitions import move_selected
from teams.models import Team


@dataclass(frozen=True)
class SubmittedArray:
    array: JobArray
    created: bool  # False when an earlier submission with the same idempotency key exists


def previous_array(user: Any, idempotency_key: str | None) -> JobArray | None:
    if not idempotency_key:
        return None
    return JobArray.objects.filter(user=user, idempotency_key=idempotency_key).first()


def submit_array(
    user: Any,
    team: Team | None,
    flavor: Flavor,
    fields: dict[str, Any],
    spec: ArraySpec,
    deps: Dependencies,
    idempotency_key: str | None = None,
    idempotency_body: str | None = None,
) -> SubmittedArray:
    """Create the array and all its tasks, their first events and their dependencies in one
    statement (one round trip however many tasks), inserting nothing unless the user may
    submit to the team and the idempotency key is new (a retry returns the first array)."""
    earlier = previous_array(user, idempotency_key)
    if earlier is not None:
        return SubmittedArray(earlier, created=False)
    if team is None:
        team = only_team(user)
    data = job_columns(fields)
    array = JobArray(
        team=team,
        user=user,
        name=data.get("name", ""),
        spec=spec.text,
        size=spec.size,
        max_concurrent=spec.max_concurrent,
        values=list(spec.values) if spec.values is not None else [],
        idempotency_key=idempotency_key or None,
        idempotency_body=idempotency_body if idempotency_key else None,
    )
    template = Job(
        team=team,
        user=user,
        flavor=flavor,
        state=JobState.PENDING,
        keep_if_unmet=deps.keep_if_unmet,
        **data,
    )
    event = JobEvent(
        from_state="",
        to_state=JobState.PENDING,
        reason="submitted",
        actor=f"user:{user.get_username()}",
    )
    reason = initial_reason(deps) if deps else None
    statement, params = _insert_statement(array, template, event, spec, deps, reason, user)
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(statement, params)
                row = cursor.fetchone()
            if row is not None:
                transaction.on_commit(nudge_cycle)
    except IntegrityError:
        if not Flavor.objects.filter(pk=flavor.pk).exists():
            raise SubmissionRefused(f"Unknown flavor {flavor.name}.", field="flavor") from None
        raise
    if row is None:
        existing = previous_array(user, idempotency_key)
        if existing is not None:
            return SubmittedArray(existing, created=False)
        raise SubmissionRefused(
            f"you are not a member of team {team.slug}", field="team", status=403
        )
    (array.pk,) = row
    return SubmittedArray(array, created=True)


def _insert_statement(
    array: JobArray,
    template: Job,
    event: JobEvent,
    spec: ArraySpec,
    deps: Dependencies,
    reason: dict[str, Any] | None,
    user: Any,
) -> tuple[str, list[Any]]:
    """The statement and its parameters, built together so that each `%s` sits next to its
    value. Every column goes through its field's `pre_save` and `get_db_prep_save`, as in
    `submission_sql`."""
    q = connection.ops.quote_name
    params: list[Any] = []

    def param(value: Any, cast: str) -> str:
        params.append(value)
        return f"%s::{cast}"

    def cast_of(field: Any) -> str:
        return str(field.cast_db_type(connection))

    array_values = dict(
        zip(
            [f.name for f in sql.inserted_fields(JobArray)],
            sql.stored_values(array),
            strict=True,
        )
    )
    array_select = ", ".join(
        param(array_values[f.name], cast_of(f)) for f in sql.inserted_fields(JobArray)
    )
    membership = sql.membership_exists("%s")
    site_admin = param(bool(user.is_superuser), "boolean")
    params += [array.team_id, user.pk]
    new_array = (
        f"INSERT INTO {q(JobArray._meta.db_table)} {sql.column_list(JobArray)} "
        f"SELECT {array_select} WHERE {site_admin} OR {membership} "
        f"ON CONFLICT DO NOTHING RETURNING {q('id')}"
    )
    tasks = (
        f"SELECT {q('t')}.* FROM unnest({param(list(spec.indices), 'integer[]')}, "
        f"{param(list(spec.values) if spec.values is not None else None, 'text[]')}) "
        f"WITH ORDINALITY AS {q('t')}({q('idx')}, {q('val')}, {q('ord')})"
    )

    def capped() -> str:
        """SQL: the task is past the array's first K (only the first K start out offered)."""
        if spec.max_concurrent is None:
            return "false"
        return f"{q('t')}.{q('ord')} > {param(spec.max_concurrent, 'integer')}"

    def array_limit_reason() -> str:
        return (
            f"jsonb_build_object('code', '{ARRAY_LIMIT}', 'numbers', jsonb_build_object("
            f"'array', {q('a')}.{q('id')}, 'limit', {param(spec.max_concurrent, 'integer')}), "
            f"'job_ids', '[]'::jsonb)"
        )

    held_for_deps = "true" if deps else "false"
    template_values = dict(
        zip([f.name for f in sql.inserted_fields(Job)], sql.stored_values(template), strict=True)
    )
    expressions: list[str] = []
    for f in sql.inserted_fields(Job):
        if f.name == "array":
            expressions.append(f"{q('a')}.{q('id')}")
        elif f.name == "array_index":
            expressions.append(f"{q('t')}.{q('idx')}")
        elif f.name == "env":
            expressions.append(
                f"({param(template_values['env'], 'jsonb')} || jsonb_build_object("
                f"'GPUQUEUE_ARRAY_ID', {q('a')}.{q('id')}::text, "
                f"'GPUQUEUE_ARRAY_INDEX', {q('t')}.{q('idx')}::text, "
                f"'GPUQUEUE_ARRAY_COUNT', {param(str(spec.size), 'text')}) || "
                f"CASE WHEN {q('t')}.{q('val')} IS NULL THEN '{{}}'::jsonb "
                f"ELSE jsonb_build_object('GPUQUEUE_ARRAY_VALUE', {q('t')}.{q('val')}) END)"
            )
        elif f.name == "hold":
            expressions.append(
                f"CASE WHEN {held_for_deps} THEN '{JobHold.DEPENDENCIES.value}' "
                f"WHEN {capped()} THEN '{JobHold.ARRAY_LIMIT.value}' ELSE '' END"
            )
        else:
            expressions.append(param(template_values[f.name], cast_of(f)))
    new_jobs = (
        f"INSERT INTO {q(Job._meta.db_table)} {sql.column_list(Job)} "
        f"SELECT {', '.join(expressions)} FROM {q('new_array')} {q('a')} "
        f"CROSS JOIN {q('tasks')} {q('t')} RETURNING {q('id')}, {q('hold')}"
    )
    event_fields = [f.name for f in sql.inserted_fields(JobEvent) if f.name != "job"]
    event_values = dict(zip(event_fields, sql.stored_values(event, skip="job"), strict=True))
    event_select = ", ".join(
        f"{q('nj')}.{q('id')}" if f.name == "job" else param(event_values[f.name], cast_of(f))
        for f in sql.inserted_fields(JobEvent)
    )
    new_events = (
        f"INSERT INTO {q(JobEvent._meta.db_table)} {sql.column_list(JobEvent)} "
        f"SELECT {event_select} FROM {q('new_jobs')} {q('nj')}"
    )
    pairs = deps.pairs()
    new_deps = (
        f"INSERT INTO {q(JobDependency._meta.db_table)} (job_id, upstream_id, kind) "
        f"SELECT {q('nj')}.{q('id')}, {q('d')}.{q('up')}, {q('d')}.{q('kind')} "
        f"FROM {q('new_jobs')} {q('nj')} CROSS JOIN unnest("
        f"{param([p[0] for p in pairs], 'bigint[]')}, {param([p[1] for p in pairs], 'text[]')}) "
        f"AS {q('d')}({q('up')}, {q('kind')})"
    )
    # A held task shows why: its dependencies, or the array's limit (made after the
    # statements before it: the parameters go in the order of the text).
    new_standings = (
        f"INSERT INTO {q(Standing._meta.db_table)} (job_id, reason) "
        f"SELECT {q('nj')}.{q('id')}, CASE WHEN {q('nj')}.{q('hold')} = "
        f"'{JobHold.DEPENDENCIES.value}' THEN {param(reason, 'jsonb')} "
        f"ELSE {array_limit_reason()} END "
        f"FROM {q('new_jobs')} {q('nj')} CROSS JOIN {q('new_array')} {q('a')} "
        f"WHERE {q('nj')}.{q('hold')} <> ''"
    )
    statement = (
        f"WITH {q('new_array')} AS ({new_array}), {q('tasks')} AS ({tasks}), "
        f"{q('new_jobs')} AS ({new_jobs}), {q('new_events')} AS ({new_events}), "
        f"{q('new_deps')} AS ({new_deps}), {q('new_standings')} AS ({new_standings}) "
        f"SELECT {q('id')} FROM {q('new_array')}"
    )
    return statement, params


# --- The cap, kept by the cycle ------------------------------------------------------------------


def _hold_sql() -> str:
    q = connection.ops.quote_name
    job, arrays = q(Job._meta.db_table), q(JobArray._meta.db_table)
    standing = q(Standing._meta.db_table)
    holding = ", ".join(f"'{s}'" for s in sorted(HOLDING))
    return f"""
    WITH ranked AS MATERIALIZED (
        SELECT j.id, j.array_id, a.max_concurrent AS lim,
               row_number() OVER (PARTITION BY j.array_id ORDER BY j.array_index) AS rank
        FROM {job} j JOIN {arrays} a ON a.id = j.array_id
        WHERE j.state = 'PENDING' AND j.hold IN ('', %(held)s::text)
          AND a.max_concurrent IS NOT NULL
    ),
    -- MATERIALIZED: computed once, not once per task (the planner cannot estimate `ranked`).
    busy AS MATERIALIZED (
        SELECT j.array_id, count(*) AS n FROM {job} j
        WHERE j.array_id IN (SELECT DISTINCT r.array_id FROM ranked r)
          AND j.state IN ({holding})
        GROUP BY j.array_id
    ),
    wanted AS (
        SELECT r.id, r.array_id, r.lim,
               CASE WHEN r.rank > r.lim - coalesce(b.n, 0) THEN %(held)s::text ELSE '' END AS hold
        FROM ranked r LEFT JOIN busy b ON b.array_id = r.array_id
    ),
    changed AS (
        UPDATE {job} j SET hold = w.hold, estimated_start = NULL
        FROM wanted w WHERE j.id = w.id AND j.hold <> w.hold
        RETURNING j.id, w.hold, w.array_id, w.lim
    ),
    shown AS (
        INSERT INTO {standing} (job_id, reason, queue_position, cluster_position)
        SELECT c.id, CASE WHEN c.hold = '' THEN NULL ELSE jsonb_build_object(
            'code', %(code)s::text,
            'numbers', jsonb_build_object('array', c.array_id, 'limit', c.lim),
            'job_ids', '[]'::jsonb) END, NULL, NULL
        FROM changed c
        ON CONFLICT (job_id) DO UPDATE SET reason = excluded.reason,
            queue_position = NULL, cluster_position = NULL
    )
    SELECT count(*) FROM changed
    """


def hold_over_limit() -> int:
    """Hold each capped array's PENDING tasks beyond its free slots (K less its tasks holding
    GPUs), lowest indices first, and release those within them: one UPDATE that writes only
    the tasks whose hold changes. Returns how many it wrote."""
    with connection.cursor() as cursor:
        cursor.execute(_hold_sql(), {"held": JobHold.ARRAY_LIMIT.value, "code": ARRAY_LIMIT})
        return int(cursor.fetchone()[0])


# --- Reading and cancelling ----------------------------------------------------------------------


def counts_by_state(array: JobArray) -> dict[str, int]:
    """Tasks per state, every state present (0 for none)."""
    return counts_by_array([array.pk])[array.pk]


def counts_by_array(array_ids: Collection[int]) -> dict[int, dict[str, int]]:
    """`counts_by_state` of each array, in one grouped query (a page of arrays)."""
    counts = {array_id: dict.fromkeys(JobState.values, 0) for array_id in array_ids}
    rows = (
        Job.objects.filter(array__in=list(array_ids))
        .order_by()
        .values_list("array_id", "state")
        .annotate(n=Count("id"))
    )
    for array_id, state, n in rows:
        counts[array_id][state] = n
    return counts


def may_cancel_array(user: Any, array: JobArray) -> bool:
    """As for a job: its submitter, an admin of its team or a site admin."""
    return may_cancel_owned(user, team_id=array.team_id, owner_id=array.user_id)


class ArrayCancelRefused(Exception):
    pass


def cancel_tasks(
    user: Any,
    array: JobArray,
    *,
    indices: Collection[int] | None = None,
    states: Collection[str] | None = None,
    reason: str = "cancelled",
) -> list[int]:
    """Cancel the array's unfinished tasks, or those of `indices` and/or in `states`, in one
    move of the door (their events, and the ledger rows of those holding GPUs, in the same
    statement); tasks holding GPUs are stopped on the cluster after commit.
    Returns the ids cancelled (none: nothing matched, which is not an error)."""
    if not may_cancel_array(user, array):
        raise ArrayCancelRefused(
            "only the array's submitter, a team admin or a site admin may cancel its tasks"
        )
    unfinished = [s.value for s in JobState if s not in FINAL]
    wanted = [s for s in unfinished if states is None or s in states]
    tasks = Job.objects.filter(array=array, state__any=wanted)
    if indices is not None:
        tasks = tasks.filter(array_index__any=sorted(indices))
    with transaction.atomic():
        moved = move_selected(
            tasks,
            JobState.CANCELLED,
            reason=reason,
            actor=f"user:{user.get_username()}",
            changes={"finished_at": timezone.now(), "hold": ""},
        )
        for task in moved:
            if task.from_state in HOLDING:
                transaction.on_commit(lambda task=task: stop_on_cluster(task.job_id, task.attempt))
    return [task.job_id for task in moved]
