"""What every list endpoint's query filter shares: one vocabulary with the dashboard and the CLI.

- A query parameter the endpoint does not know is refused (400, naming the ones it knows), as
  an unknown body field is: `?nmae=x` silently listing everything hides a typo.
- States are named as in the dashboard, in any case: a state (`pending`, `PENDING`) or a group
  (`active`, `holding`, `finished`); a wrong one lists the valid names.
"""

from __future__ import annotations

from typing import Any

import django_filters as filters
from django import forms
from django.db.models import Q

from gpuqueue.core.states import STATE_NAMES, states_named, unknown_state_message

# Read by the pagination and the renderers, not by the filter.
NOT_FILTERS = frozenset({"cursor", "page_size", "format"})


class StrictFilterSet(filters.FilterSet):
    def is_valid(self) -> bool:
        valid = super().is_valid()
        unknown = sorted(set(self.data) - set(self.filters) - NOT_FILTERS)
        if unknown:
            known = ", ".join(sorted({*self.filters, *NOT_FILTERS}))
            for name in unknown:
                self.form.errors[name] = self.form.error_class(
                    [f"Unknown query parameter {name!r}; this list takes: {known}."]
                )
        _carry_messages_as_params(self.form.errors)
        return valid and not unknown


def _carry_messages_as_params(errors: Any) -> None:
    """Give every message without parameters its text as a parameter.

    django-filter's DRF backend formats each message with `message % (params or ())`, unlike
    Django, which formats only messages that have parameters; a message that quotes the input
    (an unknown parameter's name, a state's name) and holds a `%` would then fail to format
    (a 500) or lose its `%`. As "%(message)s" with the text as its parameter, both read it as
    written."""
    for messages in errors.values():
        messages.data = [
            error
            if error.params
            else forms.ValidationError(
                "%(message)s", code=error.code, params={"message": error.message}
            )
            for error in messages.as_data()
        ]


class StateField(forms.MultipleChoiceField):
    """State names in any case; each becomes the set of states it stands for."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("choices", None)
        super().__init__(choices=[(name, name) for name in STATE_NAMES], **kwargs)

    def valid_value(self, value: Any) -> bool:
        return states_named(str(value)) is not None

    def validate(self, value: Any) -> None:
        for name in value or ():
            if states_named(str(name)) is None:
                raise forms.ValidationError(unknown_state_message(str(name)), code="invalid_choice")
        super().validate(value)


class StateFilter(filters.MultipleChoiceFilter):
    field_class = StateField

    def filter(self, qs: Any, value: Any) -> Any:
        if not value:
            return qs
        wanted: set[str] = set()
        for name in value:
            wanted |= states_named(str(name)) or set()
        return qs.filter(Q(**{f"{self.field_name}__in": sorted(wanted)}))
