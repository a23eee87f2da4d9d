"""A serializer's validated data for input of plain values, without DRF's per-field machinery.

DRF validates a body field by field: copy and bind every field, then for each one
`get_value`, `run_validation` (`validate_empty_values`, `to_internal_value`, the validators),
the serializer's `validate_<field>` and `set_value`, with the errors gathered as it goes. For
the submission that was a fifth of a request's CPU (about 1.0 M instructions of 4.9 M), nearly
all of it the generic steps that change nothing for a JSON body such as a pipeline sends.

`plain_internal_value` takes the same steps for the values whose answer is plain to see: a
`str` for a string field (blank and whitespace handled as CharField does), an exact `int` for
an integer field, a `bool`, a list or dict of those, None where null is allowed, a missing
field's default. It runs the same validators (each field's own list), the same lookups and
the same `validate_<field>` methods on them, in the same order, and builds the same dict.
Anything else, or any refusal, returns None and the caller takes DRF's own path, which
gives the answer and its errors exactly as before: this path never answers with an error.
tests/api/test_plain_input.py compares both paths on generated bodies.

Only exact field classes listed in `_KINDS` take it (a subclass may convert differently); a
serializer with read-only fields, a field whose source is not its own name or a partial
update goes DRF's way whole.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.fields import empty

from gpuqueue.api.fields import (
    LookupField,
    StrictBooleanField,
    StrictCharField,
    StrictDictField,
    StrictIntegerField,
)


class _NotPlain(Exception):
    """The value is not plain: let DRF decide."""


def _validators(field: Any, value: Any) -> Any:
    # Field.run_validators with the field's own list, as run_validation runs it.
    if field.validators:
        field.run_validators(value)
    return value


def _blank(field: Any, value: Any) -> bool:
    # CharField.run_validation's blank test on a str: True for a blank value the field allows
    # (it returns "" at once); a blank value it refuses, or no str, is DRF's to answer.
    if type(value) is not str:
        raise _NotPlain
    if value == "" or (field.trim_whitespace and value.strip() == ""):
        if not field.allow_blank:
            raise _NotPlain
        return True
    return False


def _string(field: Any, value: Any, context: Any) -> Any:
    # CharField.run_validation, then StrictCharField.to_internal_value on a str.
    if _blank(field, value):
        return ""
    return _validators(field, value.strip() if field.trim_whitespace else value)


def _lookup(field: Any, value: Any, context: Any) -> Any:
    # CharField.run_validation's blank test, then LookupField.to_internal_value.
    if _blank(field, value):
        return ""
    found = field.find(context, value)
    if found is None:
        raise _NotPlain
    return _validators(field, found)


def _integer(field: Any, value: Any, context: Any) -> Any:
    # StrictIntegerField refuses bool and anything not an int; IntegerField then returns
    # int(str(value)), the same int.
    if type(value) is not int:
        raise _NotPlain
    return _validators(field, value)


def _boolean(field: Any, value: Any, context: Any) -> Any:
    if type(value) is not bool:
        raise _NotPlain
    return _validators(field, value)


def _list(field: Any, value: Any, context: Any) -> Any:
    # ListField.to_internal_value and run_child_validation on a list.
    if type(value) is not list or (not field.allow_empty and not value):
        raise _NotPlain
    return _validators(field, [_value(field.child, item, context) for item in value])


def _dict(field: Any, value: Any, context: Any) -> Any:
    # DictField.to_internal_value and run_child_validation on a dict with str keys.
    if type(value) is not dict or (not field.allow_empty and not value):
        raise _NotPlain
    result = {}
    for key, item in value.items():
        if type(key) is not str:
            raise _NotPlain
        result[key] = _value(field.child, item, context)
    return _validators(field, result)


_KINDS: dict[type, Any] = {
    StrictCharField: _string,
    LookupField: _lookup,
    StrictIntegerField: _integer,
    StrictBooleanField: _boolean,
    serializers.ListField: _list,
    StrictDictField: _dict,
}


def _value(field: Any, value: Any, context: Any) -> Any:
    """What `field.run_validation(value)` returns for a given, plain value."""
    if value is None:
        # validate_empty_values: None is returned as it is, without validators, where allowed.
        # (CharField.run_validation's blank test does not take str(None) for blank.)
        if not field.allow_null:
            raise _NotPlain
        return None
    kind = _KINDS.get(type(field))
    if kind is None:
        raise _NotPlain
    return kind(field, value, context)


class _Plan:
    """Per serializer class: its writable fields in order, with their validate_<name> methods."""

    def __init__(self, serializer: serializers.Serializer) -> None:
        built = type(serializer)._built_fields  # type: ignore[attr-defined]
        self.ok = all(
            not field.read_only and field.source in (None, name) for name, field in built.items()
        ) and not getattr(getattr(serializer, "Meta", None), "validators", None)
        self.names = frozenset(built)
        self.fields = [
            (name, field, getattr(type(serializer), f"validate_{name}", None))
            for name, field in built.items()
        ]


def plain_internal_value(serializer: serializers.Serializer, data: Any) -> dict[str, Any] | None:
    """`serializer.to_internal_value(data)` for a dict of plain values, or None (DRF's way).

    For serializers with fields built once per class (`FieldsBuiltOnce`), whose fields read
    the request only through their context: the fields here are the class's, unbound, and a
    lookup gets the serializer's context."""
    if type(data) is not dict or serializer.partial:
        return None
    cls = type(serializer)
    plan = cls.__dict__.get("_plain_plan")
    if plan is None:
        if cls.__dict__.get("_built_fields") is None:
            serializer.get_fields()  # builds them once for the class
        plan = _Plan(serializer)
        cls._plain_plan = plan  # type: ignore[attr-defined]
    if not plan.ok or not data.keys() <= plan.names:
        return None  # unknown fields: DRF's path refuses them
    context = serializer.context
    ret: dict[str, Any] = {}
    try:
        for name, field, validate in plan.fields:
            value = data.get(name, empty)
            if value is empty:
                # validate_empty_values and get_default: a default is returned as it is.
                if field.required:
                    return None
                default = field.default
                if default is empty:
                    continue
                if callable(default):
                    if getattr(default, "requires_context", False):
                        return None
                    default = default()
                value = default
            else:
                value = _value(field, value, context)
            if validate is not None:
                value = validate(serializer, value)
            ret[name] = value
    except (_NotPlain, ValidationError, DjangoValidationError):
        return None
    return ret
