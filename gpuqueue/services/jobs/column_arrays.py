"""A column's values bound as one query parameter, for set-based writes of thousands of rows
(`UPDATE … FROM unnest(…)`, `INSERT … SELECT … FROM unnest(…)`).

The arrays go in psycopg's binary format (`%b`): as text, every element of an array is escaped
by a regular expression, which was most of a cycle writing 43,000 reasons. JSON values go as
one JSON document (one `json.dumps` of the list, instead of one per value) that PostgreSQL
turns back into an array in the same order; integers and strings as they are; anything else
through the field's own preparation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import CharField, Field, IntegerField, JSONField, TextField
from psycopg.types.json import Jsonb


def array_sql(field: Field[Any, Any]) -> str:
    """The SQL that reads `field`'s parameter as an array of its column's type."""
    if isinstance(field, JSONField):
        return (
            # None is SQL NULL, as Django stores it, not JSON's null.
            "ARRAY(SELECT NULLIF(e, 'null') FROM jsonb_array_elements(%b::jsonb) "
            "WITH ORDINALITY AS t (e, n) ORDER BY n)"
        )
    return f"%b::{field.cast_db_type(connection)}[]"


def array_param(field: Field[Any, Any], values: Sequence[Any]) -> Any:
    """`values` of `field` as the one parameter `array_sql` reads."""
    if isinstance(field, JSONField):
        return Jsonb(list(values), dumps=partial(json.dumps, cls=field.encoder))
    if isinstance(field, IntegerField) and all(v is None or type(v) is int for v in values):
        return list(values)
    if isinstance(field, CharField | TextField) and all(
        v is None or type(v) is str for v in values
    ):
        return list(values)  # what their preparation would return, without a call per value
    db = connections[DEFAULT_DB_ALIAS]  # not the proxy: each of its lookups is a thread-local read
    return [field.get_db_prep_save(value, db) for value in values]
