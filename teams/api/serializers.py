"""Teams, memberships, tokens and the audit trail over the API; writes call teams.services."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpuqueue.api.fields import StrictCharField, reject_unknown_fields
from teams import services
from teams.models import (
    MAX_ALLOWED,
    ApiToken,
    AuditEntry,
    Membership,
    Role,
    Team,
    allowed_errors,
    dns_label,
)


def _user(serializer: serializers.Serializer) -> Any:
    request = serializer.context.get("request")
    return getattr(request, "user", None)


class TeamSerializer(serializers.ModelSerializer):
    slug = serializers.SlugField(max_length=63)
    name = StrictCharField(max_length=200)
    namespace = StrictCharField(max_length=63, validators=[dns_label])
    parent = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Team.objects.all(),
        required=False,
        allow_null=True,
        error_messages={"does_not_exist": "Unknown team {value}."},
    )
    role = serializers.SerializerMethodField(help_text="Your role in the team, if any.")

    class Meta:
        model = Team
        fields = ["id", "slug", "name", "namespace", "parent", "created_at", "role"]
        read_only_fields = ["id", "created_at", "role"]

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_role(self, team: Team) -> str | None:
        roles = self.context.get("roles")
        if roles is None:
            user = _user(self)
            roles = (
                dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
                if user is not None and user.is_authenticated
                else {}
            )
            self.context["roles"] = roles
        return roles.get(team.pk)

    def validate_slug(self, slug: str) -> str:
        if self.instance is not None and slug != self.instance.slug:
            raise serializers.ValidationError("A team's slug cannot change.")
        if self.instance is None and Team.objects.filter(slug=slug).exists():
            raise serializers.ValidationError(f"A team {slug} exists.")
        return slug

    def validate_namespace(self, namespace: str) -> str:
        taken = Team.objects.filter(namespace=namespace)
        if self.instance is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise serializers.ValidationError(f"Namespace {namespace} belongs to another team.")
        return namespace

    def create(self, validated_data: dict[str, Any]) -> Team:
        return services.create_team(_user(self), **validated_data)

    def update(self, instance: Team, validated_data: dict[str, Any]) -> Team:
        validated_data.pop("slug", None)
        return services.update_team(_user(self), instance, **validated_data)


def _allowed(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=StrictCharField(max_length=253),
        max_length=MAX_ALLOWED,
        required=False,
        help_text=help_text,
    )


class TeamAllowedSerializer(serializers.Serializer):
    """What the team's jobs may use in its namespace: names, where `*` matches any run of
    characters. A job naming anything else is refused at submission."""

    service_accounts = _allowed("ServiceAccounts jobs may run as.")
    secrets = _allowed(
        "Secrets jobs may take variables (env_from_secrets) or image pull "
        "credentials (image_pull_secrets) from."
    )
    claims = _allowed("PersistentVolumeClaims jobs may mount (volumes).")

    # The API's names for the team's columns.
    COLUMNS = {
        "service_accounts": "allowed_service_accounts",
        "secrets": "allowed_secrets",
        "claims": "allowed_claims",
    }

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)

    def to_representation(self, team: Team) -> dict[str, list[str]]:
        return {name: list(getattr(team, column)) for name, column in self.COLUMNS.items()}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors = {name: found for name, value in attrs.items() if (found := allowed_errors(value))}
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def update(self, instance: Team, validated_data: dict[str, Any]) -> Team:
        lists = {self.COLUMNS[name]: value for name, value in validated_data.items()}
        return services.set_allowed(_user(self), instance, **lists)


class MembershipSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Team.objects.none(),
        error_messages={"does_not_exist": "Unknown team {value}."},
    )
    user = serializers.SlugRelatedField(
        slug_field="username",
        queryset=get_user_model().objects.filter(is_active=True),
        error_messages={"does_not_exist": "Unknown user {value}."},
    )
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)

    class Meta:
        model = Membership
        fields = ["id", "team", "user", "role"]
        read_only_fields = ["id"]
        validators: list[Any] = []  # add_member answers a duplicate with 409

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        user = _user(self)
        # A team the caller cannot see is unknown (its objects answer 404 elsewhere).
        self.fields["team"].queryset = (
            Team.objects.of_user(user)
            if user is not None and user.is_authenticated
            else Team.objects.none()
        )

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is not None:
            for key in ("team", "user"):
                if key in attrs and attrs[key] != getattr(self.instance, key):
                    raise serializers.ValidationError({key: ["Cannot change; add a membership."]})
        return attrs

    def create(self, validated_data: dict[str, Any]) -> Membership:
        return services.add_member(
            _user(self), validated_data["team"], validated_data["user"], validated_data["role"]
        )

    def update(self, instance: Membership, validated_data: dict[str, Any]) -> Membership:
        return services.change_role(
            _user(self), instance, validated_data.get("role", instance.role)
        )


class TokenSerializer(serializers.ModelSerializer):
    """A token as listed: never its secret. The secret appears once, in the create response."""

    user = serializers.SlugRelatedField(
        slug_field="username",
        queryset=get_user_model().objects.filter(is_active=True),
        required=False,
        help_text="Site admins may create tokens for others; default: you.",
        error_messages={"does_not_exist": "Unknown user {value}."},
    )
    name = StrictCharField(max_length=100)
    token = serializers.SerializerMethodField(
        help_text="The secret, shown only in the response that creates the token."
    )
    active = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "user",
            "name",
            "prefix",
            "token",
            "created_at",
            "last_used_at",
            "expires_at",
            "revoked_at",
            "active",
        ]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at"]

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_token(self, token: ApiToken) -> str | None:
        return getattr(token, "secret", None)

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_active(self, token: ApiToken) -> bool:
        now = timezone.now()
        return token.revoked_at is None and (token.expires_at is None or token.expires_at > now)

    def validate_user(self, user: Any) -> Any:
        actor = _user(self)
        if not services.may_manage_token(actor, user):
            raise serializers.ValidationError("You may create tokens for yourself only.")
        return user

    def validate_expires_at(self, expires_at: Any) -> Any:
        if expires_at is not None and expires_at <= timezone.now():
            raise serializers.ValidationError("Must be in the future.")
        return expires_at

    def create(self, validated_data: dict[str, Any]) -> ApiToken:
        actor = _user(self)
        token, secret = services.create_token(
            validated_data.get("user") or actor,
            name=validated_data["name"],
            actor=actor,
            expires_at=validated_data.get("expires_at"),
        )
        token.secret = secret  # type: ignore[attr-defined]
        return token

    def update(self, instance: ApiToken, validated_data: dict[str, Any]) -> ApiToken:
        raise NotImplementedError  # tokens are created and revoked, never edited


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(
        source="actor.username", read_only=True, allow_null=True, default=None
    )
    team = serializers.CharField(source="team.slug", read_only=True, allow_null=True, default=None)
    before = serializers.JSONField(read_only=True, allow_null=True)
    after = serializers.JSONField(read_only=True, allow_null=True)

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "at",
            "actor",
            "action",
            "object_type",
            "object_repr",
            "team",
            "before",
            "after",
        ]
        read_only_fields = fields
