"""The cycle's writes on pending jobs: why each waits, where it stands in line (`Standing`
rows), when it should start (the job row). Each is one statement over a list of rows, guarded
by the job's state (which they never change: that is services/jobs/transitions.py's)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, Standing
from gpuqueue.services.jobs.column_arrays import array_param, array_sql

# What a job row shows only while it is PENDING: the door (transitions.py) clears it on every
# move out of PENDING, and deletes the job's `Standing`.
SHOWN_WHILE_PENDING = ("estimated_start",)


def update_pending_rows(rows: list[tuple[int, Any, int | None, int | None]]) -> int:
    """Set (reason, team position, cluster position) on each job id that is still PENDING; a
    job that moved on since the cycle's snapshot is left alone. Returns the rows written."""
    return write_standings(("reason", "queue_position", "cluster_position"), rows)


def update_pending_reasons(rows: list[tuple[int, Any]]) -> int:
    """Set the pending reason on each job id that is still PENDING."""
    return write_standings(("reason",), rows)


def write_standings(columns: tuple[str, ...], rows: Sequence[tuple[Any, ...]]) -> int:
    """Set `columns` of the `Standing` of each job id (id, *values) that is still PENDING, made
    if it has none (the columns not named then empty): one INSERT … ON CONFLICT from one array
    per column, as `update_still_pending` binds them. Returns the rows written."""
    if not rows:
        return 0
    quote = connection.ops.quote_name
    fields = [Standing._meta.get_field(name) for name in columns]
    # The job's id bound as the job's own key is (an integer array, not a value per row).
    arrays, params = _unnested([Job._meta.pk, *fields], rows)
    job_id = quote("job_id")
    names = [job_id, *(quote(f.column) for f in fields)]
    listed = ", ".join(names)
    updates = ", ".join(f"{name} = excluded.{name}" for name in names[1:])
    table, job = quote(Standing._meta.db_table), quote(Job._meta.db_table)
    sql = (
        f"INSERT INTO {table} ({listed}) SELECT {', '.join('v.' + n for n in names)} "
        f"FROM unnest({arrays}) AS v ({listed}) "
        f"JOIN {job} j ON j.id = v.{job_id} AND j.state = %s "
        f"ON CONFLICT ({job_id}) DO UPDATE SET {updates}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, JobState.PENDING.value])
        return int(cursor.rowcount)


def update_estimated_starts(rows: list[tuple[int, datetime | None]]) -> int:
    """Set the estimated start on each job id that is still PENDING."""
    return len(update_still_pending(("estimated_start",), rows))


def update_still_pending(
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
) -> list[int]:
    """UPDATE job SET columns FROM unnest(one array per column) WHERE state = PENDING: one
    statement with one parameter per column, however many rows (a VALUES list of a parameter
    per cell cost more to build and parse than the update itself at tens of thousands; each
    column is bound as services/jobs/column_arrays.py binds it). Each row is (id, *values).
    Returns the ids written: a job that moved on since the cycle's snapshot is left alone."""
    if not rows:
        return []
    quote = connection.ops.quote_name
    fields = [Job._meta.get_field(name) for name in ("id", *columns)]
    arrays, params = _unnested(fields, rows)
    assignments = ", ".join(
        f"{quote(f.column)} = {quote('v')}.{quote(f.column)}" for f in fields[1:]
    )
    sql = (
        f"UPDATE {quote(Job._meta.db_table)} {quote('j')} SET {assignments} "
        f"FROM unnest({arrays}) AS {quote('v')} ({', '.join(quote(f.column) for f in fields)}) "
        f"WHERE {quote('j')}.{quote('id')} = {quote('v')}.{quote('id')} "
        f"AND {quote('j')}.{quote('state')} = %s RETURNING {quote('j')}.{quote('id')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, JobState.PENDING.value])
        return [job_id for (job_id,) in cursor.fetchall()]


def _unnested(fields: Sequence[Any], rows: Sequence[tuple[Any, ...]]) -> tuple[str, list[Any]]:
    """Each column of `rows` as one parameter of its field's type (column_arrays.py): the SQL
    list that `unnest(…)` reads, and the parameters in its order."""
    columns = zip(*rows, strict=True)
    params = [array_param(f, values) for f, values in zip(fields, columns, strict=True)]
    return ", ".join(array_sql(f) for f in fields), params
