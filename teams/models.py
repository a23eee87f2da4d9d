"""Tenants and identities: teams, their members and roles, API tokens, the audit trail."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

# A Kubernetes namespace is a DNS-1123 label.
dns_label = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit.",
)


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
