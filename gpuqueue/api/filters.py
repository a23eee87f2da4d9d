"""Query filters for the list endpoints (django-filter; they appear in the OpenAPI schema)."""

from __future__ import annotations

from typing import Any

import django_filters as filters

from gpuqueue.api.fields import UtcDateTimeFilter
from gpuqueue.api.filtersets import StateFilter, StrictFilterSet
from gpuqueue.api.job_ordering import OrderingFilter
from gpuqueue.models import Job, UtilizationSample

# `?expand=tasks`: the job list's arrays as their tasks, one row each.
EXPAND_TASKS = "tasks"


class JobFilter(StrictFilterSet):
    team = filters.CharFilter(field_name="team__slug", help_text="team slug")
    state = StateFilter(
        help_text="a state or a group (active, holding, finished), any case; repeat for "
        "several: ?state=pending&state=running"
    )
    user = filters.CharFilter(field_name="user__username", help_text="submitter's username")
    flavor = filters.CharFilter(field_name="flavor__name", help_text="flavor name")
    mine = filters.BooleanFilter(method="filter_mine", help_text="only jobs you submitted")
    preemptible = filters.BooleanFilter()
    submitted_after = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="lt")
    finished_after = UtcDateTimeFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = UtcDateTimeFilter(field_name="finished_at", lookup_expr="lt")
    ordering = OrderingFilter()
    expand = filters.ChoiceFilter(
        choices=[(EXPAND_TASKS, EXPAND_TASKS)],
        method="filter_expand",
        help_text="'tasks': every task of an array as a row of its own. Without it an array "
        "is one row: the first of its tasks that the other filters match, with the whole "
        "array in `array_summary`.",
    )

    class Meta:
        model = Job
        fields: list[str] = []

    def filter_expand(self, queryset: Any, name: str, value: str) -> Any:
        return queryset  # read by JobViewSet.filter_queryset, which collapses arrays unless given

    def filter_mine(self, queryset: Any, name: str, value: bool | None) -> Any:
        if value:
            return queryset.filter(user=self.request.user)
        return queryset


class UtilizationSampleFilter(StrictFilterSet):
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
