"""Build a serializer's fields once per class instead of once per instance.

DRF builds every field of a ModelSerializer from the model each time a serializer is created,
then deep-copies them (which constructs each field again): for the job's 34 fields and the
submission's 16 that was a fifth of a submission's CPU. Only for serializers whose fields keep
no per-request state (no queryset or choices set in `__init__`; whatever depends on the request
is read from `field.context`).
"""

from __future__ import annotations

from typing import Any

from django.utils.functional import cached_property
from rest_framework.utils.serializer_helpers import BindingDict


def shallow_copy(field: Any) -> Any:
    """What `copy.copy(field)` gives (a new instance sharing the attribute values), at about a
    third of its cost (24 against 65 us for a submission's 15 fields): `copy.copy` goes
    through `__reduce_ex__` and `copyreg`, and for a DRF field also through `Field.__new__`,
    whose `_args` and `_kwargs` the copied `__dict__` then replaces anyway. Only for classes
    without `__slots__`, `__copy__`, `__setstate__` or a `__reduce_ex__` of their own
    (tests/api/test_serializer_fields.py checks the submission's fields)."""
    new = object.__new__(type(field))
    new.__dict__.update(field.__dict__)
    return new


class FieldsBuiltOnce:
    """Fields built once per class, shallow-copied and bound per instance (for serializers
    that validate input: their fields read the request through `field.context`)."""

    def get_fields(self) -> dict[str, Any]:
        cls = type(self)
        built = cls.__dict__.get("_built_fields")
        if built is None:
            built = super().get_fields()  # type: ignore[misc]
            cls._built_fields = built  # type: ignore[attr-defined]
        return {name: shallow_copy(field) for name, field in built.items()}


class FieldsBoundOnce:
    """For output-only serializers whose fields read nothing from the request (no hyperlinks,
    no context): one bound set of fields per class, shared by every instance, so that a
    response costs no field copies at all. The fields' parent is a context-free instance of
    the same class, which is all a SerializerMethodField needs to find its method; their
    to_representation keeps no state, so threads may share them."""

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
