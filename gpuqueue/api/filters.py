"""Query filters for the list endpoints (django-filter; they appear in the OpenAPI schema)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import django_filters as filters
from django import forms
from django_filters.fields import IsoDateTimeField

from gpuqueue.models import Job, UtilizationSample
from gpuqueue.states import JobState
from teams.models import ApiToken, AuditEntry, Membership


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


class JobFilter(filters.FilterSet):
    team = filters.CharFilter(field_name="team__slug", help_text="team slug")
    state = filters.MultipleChoiceFilter(
        choices=JobState.choices, help_text="repeat for several: ?state=PENDING&state=RUNNING"
    )
    user = filters.CharFilter(field_name="user__username", help_text="submitter's username")
    flavor = filters.CharFilter(field_name="flavor__name", help_text="flavor name")
    mine = filters.BooleanFilter(method="filter_mine", help_text="only jobs you submitted")
    preemptible = filters.BooleanFilter()
    submitted_after = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="lt")
    finished_after = UtcDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = UtcDateTimeFilter(field_name="finished_at", lookup_expr="lt")

    class Meta:
        model = Job
        fields: list[str] = []

    def filter_mine(self, queryset: Any, name: str, value: bool | None) -> Any:
        if value:
            return queryset.filter(user=self.request.user)
        return queryset


class MembershipFilter(filters.FilterSet):
    team = filters.CharFilter(field_name="team__slug")
    user = filters.CharFilter(field_name="user__username")
    role = filters.CharFilter()

    class Meta:
        model = Membership
        fields: list[str] = []


class TokenFilter(filters.FilterSet):
    user = filters.CharFilter(field_name="user__username")

    class Meta:
        model = ApiToken
        fields: list[str] = []


class AuditFilter(filters.FilterSet):
    team = filters.CharFilter(field_name="team__slug")
    action = filters.CharFilter()
    object_type = filters.CharFilter()
    actor = filters.CharFilter(field_name="actor__username")
    since = UtcDateTimeFilter(field_name="at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEntry
        fields: list[str] = []


class UtilizationSampleFilter(filters.FilterSet):
    flavor = filters.CharFilter(field_name="flavor__name")
    team = filters.CharFilter(
        method="filter_team", help_text="a team slug, or 'cluster' for the whole cluster's rows"
    )
    since = UtcDateTimeFilter(field_name="at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = UtilizationSample
        fields: list[str] = []

    def filter_team(self, queryset: Any, name: str, value: str) -> Any:
        if value == "cluster":
            return queryset.filter(team__isnull=True)
        return queryset.filter(team__slug=value)
