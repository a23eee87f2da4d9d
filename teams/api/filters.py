"""Query filters for the teams' list endpoints (django-filter; they appear in the schema)."""

from __future__ import annotations

import django_filters as filters

from gpuqueue.api.fields import UtcDateTimeFilter
from gpuqueue.api.filtersets import StrictFilterSet
from teams.models import ApiToken, AuditEntry, Membership


class MembershipFilter(StrictFilterSet):
    team = filters.CharFilter(field_name="team__slug")
    user = filters.CharFilter(field_name="user__username")
    role = filters.CharFilter()

    class Meta:
        model = Membership
        fields: list[str] = []


class TokenFilter(StrictFilterSet):
    user = filters.CharFilter(field_name="user__username")

    class Meta:
        model = ApiToken
        fields: list[str] = []


class AuditFilter(StrictFilterSet):
    team = filters.CharFilter(field_name="team__slug")
    action = filters.CharFilter()
    object_type = filters.CharFilter()
    actor = filters.CharFilter(field_name="actor__username")
    since = UtcDateTimeFilter(field_name="at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEntry
        fields: list[str] = []
