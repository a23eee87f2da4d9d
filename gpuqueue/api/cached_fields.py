"""Build a serializer's fields once per class instead of once per instance.

DRF builds every field of a ModelSerializer from the model each time a serializer is created,
then deep-copies them (which constructs each field again): for the job's 34 fields and the
submission's 16 that was a fifth of a submission's CPU. Only for serializers whose fields keep
no per-request state (no queryset or choices set in `__init__`; whatever depends on the request
is read from `field.context`).
"""

from __future__ import annotations

import copy
from typing import Any

from django.utils.functional import cached_property
from rest_framework.utils.serializer_helpers import BindingDict


class FieldsBuiltOnce:
    """Fields built once per class, shallow-copied and bound per instance (for serializers
    that validate input: their fields read the request through `field.context`)."""

    def get_fields(self) -> dict[str, Any]:
        cls = type(self)
        built = cls.__dict__.get("_built_fields")
        if built is None:
            built = super().get_fields()  # type: ignore[misc]
            cls._built_fields = built  # type: ignore[attr-defined]
        return {name: copy.copy(field) for name, field in built.items()}


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
