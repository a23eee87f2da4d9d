from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from teams.models import ApiToken, AuditEntry, Membership, Team
from teams.services import allowed_state, audit_allowed


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "namespace", "parent"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

    def save_model(self, request: HttpRequest, obj: Team, form: Any, change: bool) -> None:
        """Allow-lists edited here are audited as the API's are (`team.allowed`), in the
        admin's transaction; the row is locked first, so that `before` is what this save
        replaces."""
        before = None
        if change:
            before = allowed_state(Team.objects.select_for_update().get(pk=obj.pk))
        super().save_model(request, obj, form, change)
        audit_allowed(request.user, obj, before)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["team", "role"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = [
        "user",
        "name",
        "prefix",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    # The hash is useless to read and the secret is never stored.
    exclude = ["token_hash"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["at", "actor", "action", "object_repr", "team"]
    list_filter = ["action"]
    readonly_fields = [
        "at",
        "actor",
        "action",
        "object_type",
        "object_repr",
        "team",
        "before",
        "after",
    ]
