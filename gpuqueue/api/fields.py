"""Serializer and filter fields that refuse what DRF and django-filter would silently coerce."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import django_filters as filters
from django import forms
from django_filters.fields import IsoDateTimeField
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpuqueue.client.durations import parse_duration


class StrictCharField(serializers.CharField):
    """A string and only a string: DRF's CharField turns 5 into "5", which for a command line
    or an environment hides a client bug."""

    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class LookupField(StrictCharField):
    """A name that stands for a row, found by `find(context, name)` (None: unknown).

    For the submission path, where DRF's SlugRelatedField would build an ORM query per
    request; `find` gets the serializer's context (the request is in it)."""

    default_error_messages = {"invalid": "Must be a string.", "does_not_exist": "Unknown {value}."}

    def __init__(self, *, find: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.find = find

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid")
        found = self.find(self.context, data)
        if found is None:
            self.fail("does_not_exist", value=data)
        return found

    def to_representation(self, value: Any) -> str:
        return str(value)


class StrictIntegerField(serializers.IntegerField):
    """An integer and only an integer: no "4", no 4.0, no true."""

    default_error_messages = {"invalid": "Must be an integer."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "maxLength": 40, "example": "1h30m"},
        ]
    }
)
class DurationSecondsField(StrictIntegerField):
    """Seconds as a number, or a duration as a person writes one ("90m", "2h", "1:30:00";
    gpuqueue.client.durations), read into seconds before the bounds are checked."""

    default_error_messages = {"invalid": "Must be an integer number of seconds or a duration."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, str):
            try:
                data = parse_duration(data)
            except ValueError as exc:
                raise serializers.ValidationError(str(exc), code="invalid") from None
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictDictField(serializers.DictField):
    """A JSON object of strings (keys are strings in JSON already)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("child", StrictCharField(allow_blank=True, trim_whitespace=False))
        super().__init__(**kwargs)


def reject_unknown_fields(serializer: serializers.Serializer, data: Any) -> None:
    """Refuse keys the serializer does not know: a typo ("gpus" for "gpus_per_worker") would
    otherwise be dropped and the job run with the default."""
    if not isinstance(data, dict):
        return
    writable = {name for name, field in serializer.fields.items() if not field.read_only}
    unknown = sorted(set(data) - writable)
    if unknown:
        raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})


class UtcDateTimeField(IsoDateTimeField):
    """ISO 8601, converted to UTC here: PostgreSQL refuses offsets beyond ±15:59 that Python
    accepts, and a date at the edge of the calendar cannot be shifted at all."""

    def to_python(self, value: Any) -> Any:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(UTC)
        except (OverflowError, ValueError) as exc:
            raise forms.ValidationError("Not a representable date and time.") from exc


class UtcDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField
