"""Build a serializer's fields once per class instead of once per instance.

DRF builds every field of a ModelSerializer from the model each time a serializer is created,
then deep-copies them (which constructs each field again): for the job's 34 fields and the
submission's 16 that was a fifth of a submission's CPU. Binding a field to its serializer sets
only attributes of the field itself (name, parent, source), so each instance gets shallow copies
of fields built once. Only for serializers whose fields keep no per-request state (no queryset
or choices set in `__init__`; whatever depends on the request is read from `field.context`).
"""

from __future__ import annotations

import copy
from typing import Any


class FieldsBuiltOnce:
    def get_fields(self) -> dict[str, Any]:
        cls = type(self)
        built = cls.__dict__.get("_built_fields")
        if built is None:
            built = super().get_fields()  # type: ignore[misc]
            cls._built_fields = built  # type: ignore[attr-defined]
        return {name: copy.copy(field) for name, field in built.items()}
