"""Writes on identities: teams, memberships, API tokens (hashed, shown once); each audited."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from gpuqueue.core.errors import Forbidden, Refused
from teams.models import (
    ALLOWED_FIELDS,
    ApiToken,
    AuditEntry,
    Membership,
    Role,
    Team,
    allowed_errors,
)

TOKEN_PREFIX = "gq_"


def hash_secret(secret: str) -> str:
    # Tokens carry 256 random bits, so a fast hash is enough (no password stretching needed).
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(
    user: Any, *, name: str, actor: Any, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token; the returned secret is never stored and cannot be shown again."""
    prefix = secrets.token_hex(6)
    secret = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=prefix,
            token_hash=hash_secret(secret),
            expires_at=expires_at,
        )
        AuditEntry.objects.create(
            actor=actor,
            action="token.create",
            object_type="token",
            object_repr=f"{user.get_username()}: {name} (gq_{prefix})",
            after={"user": user.get_username(), "name": name, "prefix": prefix},
        )
    return token, secret


def token_prefix(secret: str) -> str | None:
    """The prefix of a well-formed secret (gq_<prefix>_<rest>), else None."""
    if not secret.startswith(TOKEN_PREFIX):
        return None
    prefix, _, rest = secret[len(TOKEN_PREFIX) :].partition("_")
    return prefix if rest else None


def usable(token: ApiToken, secret_hash: str, now: datetime) -> bool:
    """The secret is the token's (compared in constant time), which is neither revoked nor
    expired, and its user is active."""
    if not hmac.compare_digest(token.token_hash, secret_hash):
        return False
    if token.revoked_at or (token.expires_at and token.expires_at <= now):
        return False
    return bool(token.user.is_active)


def record_use(token: ApiToken, now: datetime) -> bool:
    """Write last-used at most once a minute, so a busy pipeline does not write on every call.
    True when it wrote (and `token.last_used_at` is now `now`)."""
    if token.last_used_at is not None and (now - token.last_used_at).total_seconds() <= 60:
        return False
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
    return True


# --- Roles --------------------------------------------------------------------------------------


def is_team_admin(user: Any, team: Any) -> bool:
    """Site admins administer every team; otherwise the membership role decides."""
    if getattr(user, "is_superuser", False):
        return True
    if not getattr(user, "is_authenticated", False):
        return False
    return Membership.objects.filter(user=user, team=team, role=Role.ADMIN).exists()


# --- Teams --------------------------------------------------------------------------------------


def team_state(team: Team) -> dict[str, Any]:
    return {
        "slug": team.slug,
        "name": team.name,
        "namespace": team.namespace,
        "parent": team.parent.slug if team.parent_id and team.parent else None,
    }


def create_team(
    actor: Any, *, slug: str, name: str, namespace: str, parent: Team | None = None
) -> Team:
    if not getattr(actor, "is_superuser", False):
        raise Forbidden("only a site admin may create teams")
    with transaction.atomic():
        team = Team.objects.create(slug=slug, name=name, namespace=namespace, parent=parent)
        AuditEntry.objects.create(
            actor=actor,
            action="team.create",
            object_type="team",
            object_repr=slug,
            team=team,
            after=team_state(team),
        )
    return team


def update_team(actor: Any, team: Team, **changes: Any) -> Team:
    """Rename a team or move it under a department; the namespace is fixed once jobs ran."""
    if not getattr(actor, "is_superuser", False):
        raise Forbidden("only a site admin may change teams")
    allowed = {"name", "parent", "namespace"}
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        before = team_state(team)
        if (
            "parent" in changes
            and changes["parent"] is not None
            and changes["parent"].pk == team.pk
        ):
            raise Refused(
                "A team cannot be its own department.", fields={"parent": ["Not itself."]}
            )
        if "namespace" in changes and changes["namespace"] != team.namespace and team.jobs.exists():
            raise Refused(
                "The namespace cannot change once the team has jobs.",
                fields={"namespace": ["The team already has jobs in its namespace."]},
                status=409,
                code="conflict",
            )
        for key, value in changes.items():
            if key in allowed:
                setattr(team, key, value)
        team.save()
        AuditEntry.objects.create(
            actor=actor,
            action="team.update",
            object_type="team",
            object_repr=team.slug,
            team=team,
            before=before,
            after=team_state(team),
        )
    return team


def allowed_state(team: Team) -> dict[str, list[str]]:
    return {field: list(getattr(team, field)) for field in ALLOWED_FIELDS}


def audit_allowed(actor: Any, team: Team, before: dict[str, list[str]] | None) -> None:
    """Record a change of the team's allow-lists from `before` (None: a new team, which
    allowed nothing) to what `team` holds now, in the caller's transaction; nothing when they
    are the same. For writes that do not go through `set_allowed`: the Django admin's team
    form."""
    before = before or {field: [] for field in ALLOWED_FIELDS}
    after = allowed_state(team)
    if after != before:
        _allowed_entry(actor, team, before, after)


def _allowed_entry(
    actor: Any, team: Team, before: dict[str, list[str]], after: dict[str, list[str]]
) -> None:
    AuditEntry.objects.create(
        actor=actor,
        action="team.allowed",
        object_type="team",
        object_repr=team.slug,
        team=team,
        before=before,
        after=after,
    )


def set_allowed(actor: Any, team: Team, **lists: list[str]) -> Team:
    """Change what the team's jobs may use in its namespace (team admins and site admins).
    Submissions are checked against the new lists, and so are queued jobs when they launch
    (gpuqueue.cycle.launch.still_allowed)."""
    if not is_team_admin(actor, team):
        raise Forbidden("only the team's admins may change what its jobs may use")
    errors = {
        field: found
        for field, value in lists.items()
        if field in ALLOWED_FIELDS and (found := allowed_errors(value))
    }
    if errors:
        raise Refused("The allow-list is invalid.", fields=errors)
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        before = allowed_state(team)
        changed = [field for field in ALLOWED_FIELDS if field in lists]
        for field in changed:
            setattr(team, field, list(lists[field]))
        team.save(update_fields=changed)
        _allowed_entry(actor, team, before, allowed_state(team))
    return team


# --- Memberships --------------------------------------------------------------------------------


def membership_state(membership: Membership) -> dict[str, Any]:
    return {
        "user": membership.user.get_username(),
        "team": membership.team.slug,
        "role": membership.role,
    }


def _check_keeps_an_admin(membership: Membership, new_role: str | None) -> None:
    """A team keeps at least one admin, or nobody but site admins could manage it."""
    if membership.role != Role.ADMIN or new_role == Role.ADMIN:
        return
    others = Membership.objects.filter(team=membership.team, role=Role.ADMIN).exclude(
        pk=membership.pk
    )
    if not others.exists():
        raise Refused(
            f"{membership.user.get_username()} is the last admin of {membership.team.slug}.",
            fields={"role": ["A team must keep at least one admin."]},
            status=409,
            code="last_admin",
        )


def add_member(actor: Any, team: Team, user: Any, role: str = Role.MEMBER) -> Membership:
    if not is_team_admin(actor, team):
        raise Forbidden(f"only an admin of {team.slug} may manage its members")
    if role not in Role.values:
        raise Refused("Unknown role.", fields={"role": [f"One of {', '.join(Role.values)}."]})
    with transaction.atomic():
        if Membership.objects.filter(team=team, user=user).exists():
            raise Refused(
                f"{user.get_username()} is already a member of {team.slug}.",
                fields={"user": ["Already a member of this team."]},
                status=409,
                code="conflict",
            )
        membership = Membership.objects.create(team=team, user=user, role=role)
        AuditEntry.objects.create(
            actor=actor,
            action="membership.create",
            object_type="membership",
            object_repr=f"{user.get_username()} in {team.slug}",
            team=team,
            after=membership_state(membership),
        )
    return membership


def change_role(actor: Any, membership: Membership, role: str) -> Membership:
    if not is_team_admin(actor, membership.team):
        raise Forbidden(f"only an admin of {membership.team.slug} may manage its members")
    if role not in Role.values:
        raise Refused("Unknown role.", fields={"role": [f"One of {', '.join(Role.values)}."]})
    with transaction.atomic():
        membership = (
            Membership.objects.select_for_update()
            .select_related("team", "user")
            .get(pk=membership.pk)
        )
        _check_keeps_an_admin(membership, role)
        before = membership_state(membership)
        membership.role = role
        membership.save(update_fields=["role"])
        AuditEntry.objects.create(
            actor=actor,
            action="membership.update",
            object_type="membership",
            object_repr=f"{membership.user.get_username()} in {membership.team.slug}",
            team=membership.team,
            before=before,
            after=membership_state(membership),
        )
    return membership


def remove_member(actor: Any, membership: Membership) -> None:
    if not is_team_admin(actor, membership.team):
        raise Forbidden(f"only an admin of {membership.team.slug} may manage its members")
    with transaction.atomic():
        membership = (
            Membership.objects.select_for_update()
            .select_related("team", "user")
            .get(pk=membership.pk)
        )
        _check_keeps_an_admin(membership, None)
        AuditEntry.objects.create(
            actor=actor,
            action="membership.delete",
            object_type="membership",
            object_repr=f"{membership.user.get_username()} in {membership.team.slug}",
            team=membership.team,
            before=membership_state(membership),
            after=None,
        )
        membership.delete()


# --- Tokens -------------------------------------------------------------------------------------


def may_manage_token(actor: Any, user: Any) -> bool:
    """Users manage their own tokens; site admins everyone's."""
    return bool(getattr(actor, "is_superuser", False) or actor.pk == user.pk)


def revoke_token(actor: Any, token: ApiToken) -> ApiToken:
    """Revoke (the row stays, for the audit trail and last-used time); repeating is harmless."""
    if not may_manage_token(actor, token.user):
        raise Forbidden("only the token's owner or a site admin may revoke it")
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().select_related("user").get(pk=token.pk)
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            AuditEntry.objects.create(
                actor=actor,
                action="token.revoke",
                object_type="token",
                object_repr=f"{token.user.get_username()}: {token.name} (gq_{token.prefix})",
                before={"revoked": False},
                after={"revoked": True},
            )
    return token
