"""A submission's one statement: the membership check, the job row and its first event.

Through the ORM a submission was a membership query, two inserts and a transaction around them;
as one statement it costs a quarter less CPU (benchmarks/api_load.py: 3.7 -> 2.7 ms per
submission) and one round trip. The models stay the one description of the columns: column
lists come from `_meta`, and every value goes through its field's own `pre_save` and
`get_db_prep_save` on the way in and `from_db_value` on the way out, so a new field or a
changed type needs no edit here. tests/foundation/test_submission_sql.py reads every field
back through the ORM, and fails when the pinned Django moves, so that this is checked again.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

from gpuqueue.models import Job, JobEvent
from teams.models import Membership, Team


def insert(job: Job, event: JobEvent, *, site_admin: bool) -> tuple[int, Team | None] | None:
    """Insert `job` (its team None: the one team its user may submit to) and its first
    `event`: the new job's id and, without a team, the team it took; None when nothing was
    inserted (a used idempotency key, a user who is not a member, or without a team none or
    several to choose from). `job` gets what `pre_save` fills in (its submission time)."""
    implicit_team = job.team_id is None
    if implicit_team:
        params = [
            site_admin,
            job.user_id,
            *stored_values(job, skip="team"),
            *stored_values(event, skip="job"),
        ]
    else:
        params = [
            *stored_values(job),
            site_admin,
            job.team_id,
            job.user_id,
            *stored_values(event, skip="job"),
        ]
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(implicit_team), params)
        row = cursor.fetchone()
    if row is None:
        return None
    job_id, *team_columns = row
    return job_id, _team(team_columns) if implicit_team else None


def stored_values(obj: models.Model, skip: str = "") -> list[Any]:
    """Every column but the primary key and `skip`, as its field stores it."""
    conn = connections[DEFAULT_DB_ALIAS]
    return [
        f.get_db_prep_save(f.pre_save(obj, True), conn)
        for f in inserted_fields(type(obj))
        if f.name != skip
    ]


def _team(values: Sequence[Any]) -> Team:
    """A Team from its columns as `_team_columns` selects them, as the ORM would build it."""
    conn = connections[DEFAULT_DB_ALIAS]
    fields = Team._meta.concrete_fields
    converted = [
        value
        if value is None or not hasattr(f, "from_db_value")
        else f.from_db_value(value, None, conn)
        for f, value in zip(fields, values, strict=True)
    ]
    return Team.from_db(DEFAULT_DB_ALIAS, [f.attname for f in fields], converted)


# The statement is built once per process (`cache`): through Django's connection proxy even
# quoting a name costs a thread-local lookup.


def _q(name: str) -> str:
    return str(connection.ops.quote_name(name))


@cache
def inserted_fields(model: type[models.Model]) -> tuple[Any, ...]:
    return tuple(f for f in model._meta.concrete_fields if not f.primary_key)


def column_list(model: type[models.Model]) -> str:
    return "(" + ", ".join(_q(f.column) for f in inserted_fields(model)) + ")"


def _cast(field: Any) -> str:
    """A parameter typed as its column, so that it can stand in a SELECT list."""
    return f"%s::{field.cast_db_type(connection)}"


def _team_columns() -> str:
    return ", ".join(f"{_q('t')}.{_q(f.column)}" for f in Team._meta.concrete_fields)


def membership_exists(team_column: str) -> str:
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
    job_fields, event_fields = inserted_fields(Job), inserted_fields(JobEvent)
    event_values = ", ".join(
        f"{_q('new_job')}.{_q('id')}" if f.name == "job" else _cast(f) for f in event_fields
    )
    team_table = _q(Team._meta.db_table)
    team_column = _q(Job._meta.get_field("team").column)
    if implicit_team:
        # One row (the team's id) only when exactly one team qualifies.
        team_id = f"{_q('t')}.{_q('id')}"
        only_team = (
            f"{_q('only_team')} AS (SELECT min({team_id}) AS {_q('id')} "
            f"FROM {team_table} {_q('t')} WHERE %s OR {membership_exists(team_id)} "
            f"HAVING count(*) = 1), "
        )
        job_values = ", ".join(
            f"{_q('only_team')}.{_q('id')}" if f.name == "team" else _cast(f) for f in job_fields
        )
        insert_job = (
            f"INSERT INTO {_q(Job._meta.db_table)} {column_list(Job)} SELECT {job_values} "
            f"FROM {_q('only_team')} ON CONFLICT DO NOTHING "
            f"RETURNING {_q('id')}, {team_column}"
        )
        result = (
            f"SELECT {_q('new_job')}.{_q('id')}, {_team_columns()} "
            f"FROM {_q('new_job')} JOIN {team_table} {_q('t')} "
            f"ON {_q('t')}.{_q('id')} = {_q('new_job')}.{team_column}"
        )
    else:
        only_team = ""
        insert_job = (
            f"INSERT INTO {_q(Job._meta.db_table)} {column_list(Job)} "
            f"SELECT {', '.join(_cast(f) for f in job_fields)} "
            f"WHERE %s OR {membership_exists('%s')} ON CONFLICT DO NOTHING "
            f"RETURNING {_q('id')}"
        )
        result = f"SELECT {_q('id')} FROM {_q('new_job')}"
    return (
        f"WITH {only_team}{_q('new_job')} AS ({insert_job}), "
        f"{_q('new_event')} AS ("
        f"INSERT INTO {_q(JobEvent._meta.db_table)} {column_list(JobEvent)} "
        f"SELECT {event_values} FROM {_q('new_job')}) "
        f"{result}"
    )
