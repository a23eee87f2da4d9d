"""Roles at the door. Object visibility is the querysets' job (what a user may not see is
not found, 404); these classes answer 403 only for what the user can see but may not do."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions

from teams.models import Membership, Role
from teams.services import is_team_admin


class SiteAdminWrites(permissions.BasePermission):
    """Every signed-in user reads; only site admins write (flavors, quotas, teams, nodes)."""

    message = "Only a site admin may change this."

    def has_permission(self, request: Any, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        if request.method in permissions.SAFE_METHODS or request.user.is_superuser:
            return True
        # On one object, decide after the lookup, so that an invisible object is 404 first.
        return bool(getattr(view, "detail", False))

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        return request.method in permissions.SAFE_METHODS or bool(request.user.is_superuser)


class AnyAdmin(permissions.BasePermission):
    """Site admins and team admins (the audit trail; team admins see their teams' part)."""

    message = "Only site admins and team admins may read the audit log."

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        return bool(
            user.is_superuser or Membership.objects.filter(user=user, role=Role.ADMIN).exists()
        )


class TeamAdminWrites(permissions.BasePermission):
    """Every member of the team reads; its admins and site admins write (its allow-list)."""

    message = "Only the team's admins may change this."

    def has_permission(self, request: Any, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated)

    def has_object_permission(self, request: Any, view: Any, obj: Any) -> bool:
        return request.method in permissions.SAFE_METHODS or is_team_admin(request.user, obj)
