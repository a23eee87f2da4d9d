"""Model instances to and from hand-written SQL, for the few paths where the ORM's own work is
the cost.

Building and compiling a query through the ORM costs 0.3 to 0.9 ms of CPU on these 2-core
machines; the same query through a cursor costs about 0.15 ms. A submission made seven ORM
queries, about half of its CPU. These helpers keep the model the one description of its columns
and conversions: column lists come from `_meta`, values go through each field's own
`pre_save`/`get_db_prep_save` on the way in and `from_db_value` on the way out, so a new field or
a changed type needs no edit here. Everything else should use the ORM.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models.fields import AutoFieldMixin

M = TypeVar("M", bound=models.Model)


@dataclass(frozen=True)
class Columns:
    """A model's concrete fields, as a SELECT list under a table alias."""

    fields: tuple[Any, ...]
    attnames: tuple[str, ...]
    select: str  # "alias"."col", "alias"."col", ...
    converters: tuple[Any, ...]  # per field: from_db_value or None


@cache
def columns(model: type[models.Model], alias: str) -> Columns:
    quote = connection.ops.quote_name
    fields = tuple(model._meta.concrete_fields)
    return Columns(
        fields=fields,
        attnames=tuple(f.attname for f in fields),
        select=", ".join(f"{quote(alias)}.{quote(f.column)}" for f in fields),
        converters=tuple(getattr(f, "from_db_value", None) for f in fields),
    )


def instance(model: type[M], cols: Columns, row: tuple[Any, ...] | list[Any]) -> M:
    """A model instance from the slice of `row` that `cols` selected, as the ORM would build it."""
    conn = connections[DEFAULT_DB_ALIAS]  # once: each use of the `connection` proxy is a lookup
    values = [
        value if convert is None or value is None else convert(value, None, conn)
        for convert, value in zip(cols.converters, row, strict=True)
    ]
    return model.from_db(DEFAULT_DB_ALIAS, list(cols.attnames), values)


@dataclass(frozen=True)
class InsertColumns:
    table: str
    fields: tuple[Any, ...]
    column_list: str  # ("col", "col", ...)
    casts: tuple[str, ...]  # per field: "%s::type", so the values can stand in a SELECT list
    stored_as_is: tuple[AsIs | None, ...]  # per field: see `_stored_as_is`


@cache
def insert_columns(model: type[models.Model]) -> InsertColumns:
    quote = connection.ops.quote_name
    fields = tuple(f for f in model._meta.concrete_fields if not f.primary_key)
    return InsertColumns(
        table=quote(model._meta.db_table),
        fields=fields,
        column_list="(" + ", ".join(quote(f.column) for f in fields) + ")",
        casts=tuple(f"%s::{f.cast_db_type(connection)}" for f in fields),
        stored_as_is=tuple(_stored_as_is(f) for f in fields),
    )


# Django's own field classes whose `pre_save` and `get_db_prep_save` hand back a value of this
# exact Python type (any str, choices included) unchanged, and None as None, except that
# PostgreSQL's backend wraps integers in a sized type (`adapt_integerfield_value`; auto fields
# excepted). Exact classes only: a subclass may convert. tests/foundation/test_submission_sql.py
# checks the shortcut against the fields' own path.
_AS_IS: dict[type, type] = {
    # Dates and JSON: only None (SQL NULL) takes the shortcut.
    models.DateTimeField: type(None),
    models.JSONField: type(None),
    models.CharField: str,
    models.TextField: str,
    models.BooleanField: bool,
    models.FloatField: float,
    **{
        cls: int
        for cls in (
            models.IntegerField,
            models.BigIntegerField,
            models.SmallIntegerField,
            models.PositiveIntegerField,
            models.PositiveBigIntegerField,
            models.PositiveSmallIntegerField,
            models.AutoField,
            models.BigAutoField,
            models.SmallAutoField,
        )
    },
}


@dataclass(frozen=True)
class AsIs:
    """A field's shortcut: a value of exactly `type` (or None) is stored as `adapt(value)`."""

    type: type
    adapt: Any  # None: the value itself


def _stored_as_is(field: Any) -> AsIs | None:
    """The shortcut for this field, or None (dates, JSON, auto_now: the field's own path)."""
    if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
        return None
    target = field.target_field if field.is_relation else field  # a foreign key stores the id
    plain = _AS_IS.get(type(target))
    if plain is None:
        return None
    if plain is int and not isinstance(target, AutoFieldMixin):
        internal_type = target.get_internal_type()
        ops = connection.ops
        return AsIs(int, lambda value: ops.adapt_integerfield_value(value, internal_type))
    return AsIs(plain, None)


def insert_params(obj: models.Model, *, skip: tuple[str, ...] = ()) -> list[Any]:
    """Every non-primary-key column's value for inserting `obj` (auto_now_add filled in, JSON
    adapted), in `insert_columns` order; fields named in `skip` are left out.

    A plain value (a str for a CharField, an int for an IntegerField...) takes a shortcut
    (`_stored_as_is`): through the field's own conversion it comes back the same, and that
    cost 0.23 ms of CPU for the job's 35 fields (0.06 ms with the shortcut). Everything else
    takes the field's own path."""
    conn = connections[DEFAULT_DB_ALIAS]
    cols = insert_columns(type(obj))
    params = []
    for f, as_is in zip(cols.fields, cols.stored_as_is, strict=True):
        if skip and f.name in skip:
            continue
        if as_is is not None:
            value = getattr(obj, f.attname)
            if value is None:
                params.append(None)
                continue
            if type(value) is as_is.type or (as_is.type is str and isinstance(value, str)):
                params.append(value if as_is.adapt is None else as_is.adapt(value))
                continue
        params.append(f.get_db_prep_save(f.pre_save(obj, True), conn))
    return params
