"""The cycle's writes on pending jobs: why each waits, where it stands in line, when it should
start, and the admissions. Each is one UPDATE over a list of rows, guarded by the job's
state."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Field, IntegerField, JSONField
from psycopg.types.json import Jsonb

from gpuqueue.core.states import JobState
from gpuqueue.models import Job

# What a job shows only while it is PENDING: cleared when it is admitted.
SHOWN_WHILE_PENDING = ("pending_reason", "queue_position", "cluster_position", "estimated_start")


def update_pending_rows(rows: list[tuple[int, Any, int | None, int | None]]) -> int:
    """Set (reason, team position, cluster position) on each job id that is still PENDING; a
    job that moved on since the cycle's snapshot is left alone. Returns the rows written."""
    return len(update_still_pending(("pending_reason", "queue_position", "cluster_position"), rows))


def update_estimated_starts(rows: list[tuple[int, datetime | None]]) -> int:
    """Set the estimated start on each job id that is still PENDING."""
    return len(update_still_pending(("estimated_start",), rows))


def update_still_pending(
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    *,
    cleared: tuple[str, ...] = (),
    counted: tuple[str, ...] = (),
) -> list[int]:
    """UPDATE job SET columns FROM unnest(one array per column) WHERE state = PENDING: one
    statement with one parameter per column, however many rows (a VALUES list of a parameter
    per cell cost more to build and parse than the update itself at tens of thousands). Each
    row is (id, *values); `cleared` columns are set to NULL and `counted` ones incremented.
    Returns the ids written: a job that moved on since the cycle's snapshot is left alone."""
    if not rows:
        return []
    quote = connection.ops.quote_name
    fields = [Job._meta.get_field(name) for name in ("id", *columns)]
    arrays = ", ".join(_array_sql(f) for f in fields)
    column = {name: quote(Job._meta.get_field(name).column) for name in (*cleared, *counted)}
    assignments = ", ".join(
        [
            *(f"{quote(f.column)} = {quote('v')}.{quote(f.column)}" for f in fields[1:]),
            *(f"{column[name]} = NULL" for name in cleared),
            *(f"{column[name]} = {quote('j')}.{column[name]} + 1" for name in counted),
        ]
    )
    params = [_array(f, values) for f, values in zip(fields, zip(*rows, strict=True), strict=True)]
    sql = (
        f"UPDATE {quote(Job._meta.db_table)} {quote('j')} SET {assignments} "
        f"FROM unnest({arrays}) AS {quote('v')} ({', '.join(quote(f.column) for f in fields)}) "
        f"WHERE {quote('j')}.{quote('id')} = {quote('v')}.{quote('id')} "
        f"AND {quote('j')}.{quote('state')} = %s RETURNING {quote('j')}.{quote('id')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, JobState.PENDING.value])
        return [row[0] for row in cursor.fetchall()]


# Each column's values go as one parameter, in psycopg's binary format (`%b`): as text, every
# element of an array is escaped by a regular expression, which was most of a cycle writing
# 43,000 reasons. JSON values go as one JSON document (one `json.dumps` of the list, instead of
# one per value) that PostgreSQL turns back into an array in the same order; integers as they
# are; anything else through the field's own preparation.


def _array_sql(field: Field[Any, Any]) -> str:
    if isinstance(field, JSONField):
        return (
            # None is SQL NULL, as Django stores it, not JSON's null.
            "ARRAY(SELECT NULLIF(e, 'null') FROM jsonb_array_elements(%b::jsonb) "
            "WITH ORDINALITY AS t (e, n) ORDER BY n)"
        )
    return f"%b::{field.cast_db_type(connection)}[]"


def _array(field: Field[Any, Any], values: Sequence[Any]) -> Any:
    if isinstance(field, JSONField):
        return Jsonb(list(values), dumps=partial(json.dumps, cls=field.encoder))
    if isinstance(field, IntegerField) and all(v is None or type(v) is int for v in values):
        return list(values)
    db = connections[DEFAULT_DB_ALIAS]  # not the proxy: each of its lookups is a thread-local read
    return [field.get_db_prep_save(value, db) for value in values]
