"""Tenants and identities: teams, their members and roles, API tokens, the audit trail."""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

# A Kubernetes namespace is a DNS-1123 label.
dns_label = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit.",
)


# An entry of a team's allow-list: a Kubernetes object name (a DNS-1123 subdomain) in which
# `*` stands for any run of characters, e.g. `wandb` or `data-*`.
ALLOWED_PATTERN = re.compile(r"^[a-z0-9*]([-a-z0-9.*]*[a-z0-9*])?$")
MAX_ALLOWED = 64


def allowed_errors(patterns: object) -> list[str]:
    """What is wrong with an allow-list: a list of at most 64 names, each at most 253
    characters of lowercase letters, digits, '-', '.' and '*'."""
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        return ["A list of names."]
    errors: list[str] = []
    if len(patterns) > MAX_ALLOWED:
        errors.append(f"At most {MAX_ALLOWED} names; got {len(patterns)}.")
    for pattern in patterns:
        if len(pattern) > 253 or not ALLOWED_PATTERN.match(pattern):
            errors.append(
                f"{pattern[:80]!r} is not a Kubernetes name: lowercase letters, digits, '-' and "
                "'.', starting and ending with a letter or digit, at most 253 characters; '*' "
                "matches any run of characters."
            )
    if len(set(patterns)) != len(patterns):
        errors.append("Each name at most once.")
    return errors


def _matches(name: str, pattern: str) -> bool:
    """Whether `name` is `pattern` with each `*` standing for any run of characters. Matched
    piece by piece, leftmost first, in linear time: as a regular expression, a pattern of
    many stars against a long name backtracks for minutes (and the launch checks it too)."""
    first, *rest = pattern.split("*")
    if not rest:
        return name == pattern
    *middle, last = rest
    if len(name) < len(first) + len(last) or not (name.startswith(first) and name.endswith(last)):
        return False
    at, end = len(first), len(name) - len(last)
    for piece in middle:
        at = name.find(piece, at, end)
        if at < 0:
            return False
        at += len(piece)
    return True


class TeamQuerySet(models.QuerySet["Team"]):
    def of_user(self, user: settings.AUTH_USER_MODEL) -> TeamQuerySet:  # type: ignore[valid-type]
        if user.is_superuser:
            return self.all()
        return self.filter(memberships__user=user).distinct()


class Team(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    namespace = models.CharField(max_length=63, unique=True, validators=[dns_label])
    # One level of hierarchy: a department whose quota caps and is shared among its teams.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # What the team's jobs may use in its namespace, kept by its admins. gpuqueue's
    # ServiceAccount creates the pods, so without these lists a member could run as any
    # ServiceAccount, read any Secret and mount any claim of the namespace through gpuqueue,
    # whatever their own Kubernetes rights. Empty: none (pods run as the namespace's default
    # ServiceAccount without its token).
    allowed_service_accounts = models.JSONField(
        default=list, blank=True, help_text='ServiceAccounts jobs may run as, e.g. ["trainer"]'
    )
    allowed_secrets = models.JSONField(
        default=list,
        blank=True,
        help_text="Secrets jobs may take variables or image pull credentials from, e.g. "
        '["wandb", "ghcr-pull"]',
    )
    allowed_claims = models.JSONField(
        default=list,
        blank=True,
        help_text='PersistentVolumeClaims jobs may mount, e.g. ["imagenet", "scratch-*"]',
    )

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(parent=models.F("id")), name="team_not_its_own_parent"
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        errors = {
            field: found
            for field in ALLOWED_FIELDS
            if (found := allowed_errors(getattr(self, field)))
        }
        if errors:
            raise ValidationError(errors)

    def unlisted(self, field: str, names: Iterable[str]) -> list[str]:
        """The names that no entry of the allow-list `field` matches, in the order given."""
        patterns = getattr(self, field) or []
        return [name for name in names if not any(_matches(name, p) for p in patterns)]


# The allow-lists, by what they hold.
ALLOWED_FIELDS = {
    "allowed_service_accounts": "ServiceAccount",
    "allowed_secrets": "Secret",
    "allowed_claims": "PersistentVolumeClaim",
}


class Role(models.TextChoices):
    MEMBER = "member"
    ADMIN = "admin"


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        ordering = ["team__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ApiToken(models.Model):
    """A secret of the form gq_<prefix>_<secret>; only its SHA-256 is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    # Looked up by prefix (unique index), then compared by hash in constant time.
    prefix = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"gq_{self.prefix}_… ({self.name})"


class AuditEntry(models.Model):
    """Who changed which quota, membership or token, when, from what to what."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            # The per-team audit trail on the admin quota page: WHERE team_id = ? ORDER BY at DESC.
            models.Index(fields=["team", "-at"], name="audit_team_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.action} {self.object_repr}"
