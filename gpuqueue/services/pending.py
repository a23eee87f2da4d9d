"""The cycle's writes on pending jobs: why each waits and where it stands in line."""

from __future__ import annotations

from typing import Any

from django.db import connection

from gpuqueue.models import Job
from gpuqueue.states import JobState

_COLUMNS = ("id", "pending_reason", "queue_position", "cluster_position")


def update_pending_rows(rows: list[tuple[int, Any, int | None, int | None]]) -> int:
    """Set (reason, team position, cluster position) on each job id that is still PENDING, in
    one statement; a job that moved on since the cycle's snapshot is left alone. Returns the
    number of rows written."""
    if not rows:
        return 0
    quote = connection.ops.quote_name
    fields = [Job._meta.get_field(name) for name in _COLUMNS]
    row_sql = "(" + ", ".join(f"%s::{f.cast_db_type(connection)}" for f in fields) + ")"
    params: list[Any] = []
    for row in rows:
        params.extend(
            f.get_db_prep_save(value, connection) for f, value in zip(fields, row, strict=True)
        )
    assignments = ", ".join(
        f"{quote(f.column)} = {quote('v')}.{quote(f.column)}" for f in fields[1:]
    )
    sql = (
        f"UPDATE {quote(Job._meta.db_table)} {quote('j')} SET {assignments} "
        f"FROM (VALUES {', '.join([row_sql] * len(rows))}) "
        f"AS {quote('v')} ({', '.join(quote(f.column) for f in fields)}) "
        f"WHERE {quote('j')}.{quote('id')} = {quote('v')}.{quote('id')} "
        f"AND {quote('j')}.{quote('state')} = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, JobState.PENDING.value])
        return int(cursor.rowcount)
