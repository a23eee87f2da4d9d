"""The job's and the event's representation with fields bound once per class.

DRF builds every field of a ModelSerializer from the model each time a serializer is created,
deep-copies them and takes several steps per field to represent a value. For the job's 34
fields that is most of a submission's web CPU: without this module the API load benchmark
(benchmarks/api_load.py) answers about 30 % fewer submissions per second (800 -> 573/s, web CPU
1.6 -> 2.5 ms per submission). Only for output serializers whose fields keep no per-request
state. tests/api/test_representation.py compares every answer with DRF's own, and
tests/api/test_serializer_fields.py fails when the pinned DRF version moves, so that this is
checked again against the new DRF.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from django.utils.functional import cached_property
from rest_framework import serializers
from rest_framework.fields import Field, SkipField
from rest_framework.relations import PKOnlyObject
from rest_framework.utils.serializer_helpers import BindingDict


class FieldsBoundOnce:
    """For output-only serializers whose fields read nothing from the request (no hyperlinks,
    no context): one bound set of fields per class, shared by every instance, so that a
    response costs no field copies at all. The fields' parent is a context-free instance of
    the same class, which is all a SerializerMethodField needs to find its method; their
    to_representation keeps no state, so threads may share them.

    Their representation takes DRF's steps with less machinery (`Representation`)."""

    def to_representation(self, instance: Any) -> Any:
        cls = type(self)
        plan = cls.__dict__.get("_representation")
        if plan is None:
            plan = Representation(self.fields)
            cls._representation = plan  # type: ignore[attr-defined]
        return plan.of(instance)

    @cached_property
    def fields(self) -> Any:
        cls = type(self)
        shared = cls.__dict__.get("_bound_fields")
        if shared is None:
            shared = BindingDict(cls())
            for name, field in super().get_fields().items():  # type: ignore[misc]
                shared[name] = field
            cls._bound_fields = shared  # type: ignore[attr-defined]
        return shared


_MISSING = object()


def _same_as(field: Any) -> Any:
    """The one type whose values `field.to_representation` returns unchanged (`object`: any),
    or None. Exact classes only: a subclass may convert differently."""
    cls = type(field)
    if cls is serializers.CharField:
        return str  # str(value)
    if cls is serializers.IntegerField:
        return int  # int(value)
    if cls is serializers.BooleanField:
        return bool  # True and False are in TRUE_VALUES and FALSE_VALUES
    if cls is serializers.JSONField and not field.binary:
        return object  # the value itself
    return None


class Representation:
    """`Serializer.to_representation` for model instances, with the same answer: the same
    fields in the same order, each attribute fetched and each value converted as DRF does.

    DRF fetches every attribute through `get_attribute` (a Mapping test, a callable test and
    exception handling per step) and converts every value through the field. Here an
    attribute on a model instance is read directly, and a value that the field would return
    unchanged (a str for a CharField, an int for an IntegerField; a list of str or a dict of
    str to str or int, copied, for the container fields) is taken as it is. Anything else
    goes through the field: a value the field converts, a field whose `get_attribute` is its
    own, an attribute that is missing or callable, a step that is not a model instance. For
    the job's 34 fields that took a tenth of a submission's CPU; tests/api/
    test_representation.py compares both on generated jobs."""

    def __init__(self, fields: Any) -> None:
        self.steps = []
        for name, field in fields.items():
            if field.write_only:
                continue
            direct = type(field).get_attribute is Field.get_attribute
            attrs = tuple(field.source_attrs) if direct else None
            kind, items = type(field), None
            if kind in (serializers.ListField, serializers.DictField):
                items = _same_as(field.child)  # the type of items copied as they are
                if items is object:
                    items = None
            attr = attrs[0] if attrs is not None and len(attrs) == 1 else None
            self.steps.append((name, field, attr, attrs, _same_as(field), kind, items))

    def of(self, instance: Any) -> dict[str, Any]:
        ret: dict[str, Any] = {}
        model = isinstance(instance, Model)
        for name, field, attr, attrs, same, kind, items in self.steps:
            if attr is not None and model:  # one attribute of the instance: `_attribute`
                try:
                    value = getattr(instance, attr)
                except Exception:  # noqa: BLE001 - DRF's own fetch raises or handles it
                    value = _MISSING
                else:
                    if callable(value):
                        value = _MISSING
            else:
                value = _MISSING if attrs is None else _attribute(instance, attrs)
            if value is _MISSING:
                try:
                    value = field.get_attribute(instance)
                except SkipField:
                    continue
            if value is None or (isinstance(value, PKOnlyObject) and value.pk is None):
                ret[name] = None
            elif same is not None and (same is object or type(value) is same):
                ret[name] = value
            elif items is not None and _all_of(kind, value, items):
                ret[name] = list(value) if kind is serializers.ListField else dict(value)
            else:
                ret[name] = field.to_representation(value)
        return ret


def _attribute(instance: Any, attrs: tuple[str, ...]) -> Any:
    """`fields.get_attribute(instance, attrs)` where every step is a model instance and every
    value found is not callable; _MISSING otherwise (or on any error), for DRF to fetch."""
    value = instance
    for attr in attrs:
        if not isinstance(value, Model):
            return _MISSING
        try:
            value = getattr(value, attr)
        except Exception:  # noqa: BLE001 - DRF's own fetch raises or handles it
            return _MISSING
        if callable(value):
            return _MISSING
    return value


def _all_of(kind: type, value: Any, items: type) -> bool:
    """A list of `items` (or None) for a ListField, a dict of str to `items` (or None) for a
    DictField: what the container's to_representation copies unchanged."""
    if kind is serializers.ListField:
        return type(value) is list and all(type(v) is items or v is None for v in value)
    return type(value) is dict and all(
        type(k) is str and (type(v) is items or v is None) for k, v in value.items()
    )
