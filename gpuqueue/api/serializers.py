"""What the API reads and writes. Writes go through services (serializer.create/update call
one service each), so the rules hold for the dashboard too."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpuqueue.api import validation as v
from gpuqueue.api.cached_fields import FieldsBoundOnce
from gpuqueue.api.fields import (
    LookupField,
    StrictBooleanField,
    StrictCharField,
    StrictDictField,
    StrictIntegerField,
    reject_unknown_fields,
)
from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.states import JobState
from gpuqueue.core.taints import toleration_errors
from gpuqueue.models import Flavor, Job, JobEvent, Node, Quota, UtilizationSample
from gpuqueue.services.flavors import save_flavor
from gpuqueue.services.quotas import set_quota
from gpuqueue.services.submit import (
    TEAM_REQUIRED,
    SubmissionRefused,
    check_fits,
    flavor_for_submission,
    submittable_team,
    teams_for_submission,
)
from teams.models import Team

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
MAX_WORKERS = 1024
MAX_GPUS_PER_WORKER = 64
MAX_GRACE_SECONDS = 24 * 3600
MAX_RUNTIME_SECONDS = 30 * 24 * 3600


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False
    )


class ErrorSerializer(serializers.Serializer):
    """The one error shape: {"error": {"code", "message", "fields"?}}."""

    error = ErrorBodySerializer()


def _user(serializer_or_field: serializers.Field) -> Any:
    return _user_in(serializer_or_field.context)


def _user_in(context: dict[str, Any]) -> Any:
    return getattr(context.get("request"), "user", None)


# --- Jobs ---------------------------------------------------------------------------------------


def _signed_in(user: Any) -> bool:
    return user is not None and bool(user.is_authenticated)


def _submittable_team(context: dict[str, Any], slug: str) -> Team | None:
    # A team the caller cannot see is "unknown", as its jobs answer 404.
    user = _user_in(context)
    return submittable_team(user, slug) if _signed_in(user) else None


class JobSubmitSerializer(serializers.Serializer):
    """A submission. Every rule that Kubernetes or the engine would refuse later is checked
    here, so that a bad request changes nothing and says which field is wrong."""

    team = LookupField(
        find=_submittable_team,
        required=False,
        help_text="Team slug; may be left out by a user who belongs to exactly one team.",
        error_messages={
            "does_not_exist": "Unknown team {value}.",
            "invalid": "Must be a team slug.",
        },
    )
    flavor = LookupField(
        find=lambda context, name: flavor_for_submission(name),
        error_messages={
            "does_not_exist": "Unknown flavor {value}.",
            "invalid": "Must be a flavor name.",
        },
    )
    name = StrictCharField(required=False, max_length=63, help_text="Defaults from the image.")
    image = StrictCharField(max_length=512, trim_whitespace=False)
    command = serializers.ListField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=list,
    )
    env = StrictDictField(required=False, default=dict)
    labels = StrictDictField(required=False, default=dict)
    annotations = StrictDictField(required=False, default=dict)
    workers = StrictIntegerField(min_value=1, max_value=MAX_WORKERS, default=1)
    gpus_per_worker = StrictIntegerField(min_value=1, max_value=MAX_GPUS_PER_WORKER, default=1)
    priority = StrictIntegerField(min_value=PRIORITY_MIN, max_value=PRIORITY_MAX, default=0)
    preemptible = StrictBooleanField(default=True)
    checkpoint_grace_seconds = StrictIntegerField(
        min_value=0, max_value=MAX_GRACE_SECONDS, required=False
    )
    max_runtime_seconds = StrictIntegerField(
        min_value=1, max_value=MAX_RUNTIME_SECONDS, required=False, allow_null=True
    )
    expected_runtime_seconds = StrictIntegerField(
        min_value=1, max_value=MAX_RUNTIME_SECONDS, required=False, allow_null=True
    )

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)

    def validate_image(self, image: str) -> str:
        errors = v.image_errors(image)
        if errors:
            raise serializers.ValidationError(errors)
        return image

    def validate_name(self, name: str) -> str:
        if not v.JOB_NAME.match(name):
            raise serializers.ValidationError(
                "1–63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit."
            )
        return name

    def validate_command(self, command: list[str]) -> list[str]:
        return _checked(command, v.command_errors)

    def validate_env(self, env: dict[str, str]) -> dict[str, str]:
        return _checked(env, v.env_errors)

    def validate_labels(self, labels: dict[str, str]) -> dict[str, str]:
        return _checked(labels, v.label_errors)

    def validate_annotations(self, annotations: dict[str, str]) -> dict[str, str]:
        return _checked(annotations, v.annotation_errors)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "team" not in attrs:
            if not _signed_in(_user(self)):
                raise serializers.ValidationError({"team": [TEAM_REQUIRED]})
            # None: the submitter's only team, which `submit_job` finds as it writes the job
            # (refusing with TeamRequired when there are none or several).
            attrs["team"] = None
        if not attrs.get("name"):
            base = attrs["image"].split("@")[0].rsplit("/", 1)[-1].split(":")[0]
            attrs["name"] = re.sub(r"[^A-Za-z0-9_.-]", "-", base)[:63].strip("-_.") or "job"
        attrs.setdefault(
            "checkpoint_grace_seconds", settings.GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS
        )
        try:
            check_fits(attrs["flavor"], attrs["gpus_per_worker"])
        except SubmissionRefused as exc:
            if attrs["team"] is None and len(teams_for_submission(_user(self))) != 1:
                # As before the team was left to the insert: a missing team is reported first.
                raise serializers.ValidationError({"team": [TEAM_REQUIRED]}) from exc
            raise serializers.ValidationError({exc.field or "flavor": [str(exc)]}) from exc
        return attrs


def _checked(value: Any, rule: Any) -> Any:
    errors = rule(value)
    if errors:
        raise serializers.ValidationError(errors)
    return value


class JobSerializer(FieldsBoundOnce, serializers.ModelSerializer):
    """A job as read back: state, the pending reason as a sentence and as data, positions,
    estimated start, placement, attempts."""

    team = serializers.CharField(source="team.slug", read_only=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)
    gpus = serializers.IntegerField(read_only=True)
    command = serializers.ListField(child=serializers.CharField(), read_only=True)
    env = serializers.DictField(child=serializers.CharField(), read_only=True)
    labels = serializers.DictField(child=serializers.CharField(), read_only=True)
    annotations = serializers.DictField(child=serializers.CharField(), read_only=True)
    placement = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    pending_reason = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="The engine's reason as data: {code, numbers, job_ids}.",
    )
    pending_reason_text = serializers.SerializerMethodField(
        help_text="The pending reason as one sentence with numbers (null unless PENDING)."
    )
    idempotency_key = serializers.CharField(read_only=True, allow_null=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "team",
            "user",
            "name",
            "image",
            "command",
            "env",
            "labels",
            "annotations",
            "workers",
            "gpus_per_worker",
            "gpus",
            "flavor",
            "priority",
            "preemptible",
            "checkpoint_grace_seconds",
            "max_runtime_seconds",
            "expected_runtime_seconds",
            "idempotency_key",
            "state",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "placement",
            "pending_reason",
            "pending_reason_text",
            "queue_position",
            "cluster_position",
            "estimated_start",
            "attempts",
            "start_failures",
            "not_before",
            "exit_code",
            "message",
            "checkpoint_location",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_pending_reason_text(self, job: Job) -> str | None:
        if job.state != JobState.PENDING:
            return None
        return describe_reason(job.pending_reason)


class JobEventSerializer(FieldsBoundOnce, serializers.ModelSerializer):
    details = serializers.JSONField(read_only=True)

    class Meta:
        model = JobEvent
        fields = ["id", "at", "from_state", "to_state", "reason", "actor", "details"]
        read_only_fields = fields


# --- Flavors, quotas, nodes ---------------------------------------------------------------------


class FlavorSerializer(serializers.ModelSerializer):
    name = serializers.SlugField(max_length=63)
    node_selector = StrictDictField(required=False, default=dict)
    tolerations = serializers.ListField(
        child=StrictDictField(),
        required=False,
        default=list,
        help_text="Kubernetes tolerations of the flavor's pods: {key, operator (Equal or "
        "Exists), value, effect (NoSchedule, PreferNoSchedule, NoExecute or empty for all)}. "
        "A node is offered to the flavor only when they tolerate its NoSchedule and NoExecute "
        "taints; the GPU taint is always tolerated.",
    )

    class Meta:
        model = Flavor
        fields = [
            "id",
            "name",
            "resource_name",
            "node_selector",
            "tolerations",
            "cpu_millicores_per_gpu",
            "memory_mib_per_gpu",
            "description",
        ]
        read_only_fields = ["id"]

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)

    def validate_name(self, name: str) -> str:
        taken = Flavor.objects.filter(name=name)
        if self.instance is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise serializers.ValidationError(f"A flavor named {name} exists.")
        return name

    def validate_resource_name(self, name: str) -> str:
        errors = v.qualified_key_errors(name, "Resource")
        if errors:
            raise serializers.ValidationError(errors)
        return name

    def validate_node_selector(self, selector: dict[str, str]) -> dict[str, str]:
        return _checked(selector, v.label_errors)

    def validate_tolerations(self, tolerations: list[dict[str, str]]) -> list[dict[str, str]]:
        return _checked(tolerations, toleration_errors)

    def create(self, validated_data: dict[str, Any]) -> Flavor:
        return save_flavor(_user(self), None, **validated_data)

    def update(self, instance: Flavor, validated_data: dict[str, Any]) -> Flavor:
        return save_flavor(_user(self), instance, **validated_data)


class QuotaSerializer(serializers.ModelSerializer):
    """A team's quota for a flavor. Writes go through gpuqueue.services.quotas.set_quota; its
    verdict on oversubscription comes back in the write's response."""

    team = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Team.objects.all(),
        error_messages={"does_not_exist": "Unknown team {value}."},
    )
    flavor = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Flavor.objects.all(),
        error_messages={"does_not_exist": "Unknown flavor {value}."},
    )
    guarantee = StrictIntegerField(min_value=0, max_value=1_000_000)
    limit = StrictIntegerField(min_value=0, max_value=1_000_000)
    weight = serializers.FloatField(min_value=0, max_value=1_000_000, default=1.0)
    oversubscribe = StrictBooleanField(
        write_only=True,
        default=False,
        help_text="Allow the flavor's guarantees to add up to more than its capacity.",
    )
    oversubscribed = serializers.SerializerMethodField(
        help_text="Set on writes: whether the flavor's guarantees now exceed its capacity."
    )
    capacity = serializers.SerializerMethodField(help_text="Set on writes: the flavor's GPUs.")
    guarantees_total = serializers.SerializerMethodField(
        help_text="Set on writes: the flavor's guarantees, all teams."
    )

    class Meta:
        model = Quota
        fields = [
            "id",
            "team",
            "flavor",
            "guarantee",
            "limit",
            "weight",
            "oversubscribe",
            "oversubscribed",
            "capacity",
            "guarantees_total",
        ]
        read_only_fields = ["id"]
        validators: list[Any] = []  # set_quota decides; a second quota for a pair updates it

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)

    @extend_schema_field(serializers.BooleanField(allow_null=True))
    def get_oversubscribed(self, quota: Quota) -> bool | None:
        change = getattr(quota, "change", None)
        return change.oversubscribed if change else None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_capacity(self, quota: Quota) -> int | None:
        change = getattr(quota, "change", None)
        return change.capacity if change else None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_guarantees_total(self, quota: Quota) -> int | None:
        change = getattr(quota, "change", None)
        return change.guarantees_total if change else None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is not None:
            for key in ("team", "flavor"):
                if key in attrs and attrs[key] != getattr(self.instance, key):
                    raise serializers.ValidationError({key: ["Cannot change; create a quota."]})
            for key in ("guarantee", "limit", "weight"):
                attrs.setdefault(key, getattr(self.instance, key))
        if attrs.get("guarantee", 0) > attrs.get("limit", 0):
            raise serializers.ValidationError(
                {
                    "guarantee": [
                        f"The guarantee ({attrs['guarantee']}) may not exceed "
                        f"the limit ({attrs['limit']})."
                    ]
                }
            )
        return attrs

    def _save(self, team: Team, flavor: Flavor, attrs: dict[str, Any]) -> Quota:
        change = set_quota(
            _user(self),
            team,
            flavor,
            guarantee=attrs["guarantee"],
            limit=attrs["limit"],
            weight=attrs.get("weight", 1.0),
            oversubscribe=attrs.get("oversubscribe", False),
        )
        quota = change.quota
        quota.change = change  # type: ignore[attr-defined]
        return quota

    def create(self, validated_data: dict[str, Any]) -> Quota:
        return self._save(validated_data["team"], validated_data["flavor"], validated_data)

    def update(self, instance: Quota, validated_data: dict[str, Any]) -> Quota:
        return self._save(instance.team, instance.flavor, validated_data)


class NodeSerializer(serializers.ModelSerializer):
    capacity = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    used_externally = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    labels = serializers.DictField(child=serializers.CharField(), read_only=True)
    taints = serializers.ListField(child=serializers.DictField(), read_only=True)
    schedulable = serializers.BooleanField(read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "capacity",
            "used_externally",
            "labels",
            "taints",
            "ready",
            "cordoned",
            "drained",
            "schedulable",
            "updated_at",
        ]
        read_only_fields = fields


# --- Utilization --------------------------------------------------------------------------------


class TeamUsageSerializer(serializers.Serializer):
    team = serializers.CharField()
    allocated = serializers.IntegerField(help_text="GPUs held by admitted/running/preempting jobs")
    pending_gpus = serializers.IntegerField()
    pending_jobs = serializers.IntegerField()
    running_jobs = serializers.IntegerField()
    guarantee = serializers.IntegerField(allow_null=True)
    limit = serializers.IntegerField(allow_null=True)
    weight = serializers.FloatField(allow_null=True)
    fair_share = serializers.IntegerField(
        allow_null=True,
        help_text="GPUs the last admission cycle entitled the team to: its guarantee plus its "
        "weighted part of idle GPUs, capped by its limit (null: no cycle yet)",
    )
    share_balance_gpu_hours = serializers.FloatField(
        allow_null=True,
        help_text="time-based fair share: GPU-hours received less than the fair share lately, "
        "decayed with a one-day half-life; positive: owed, negative: in debt (null: none kept)",
    )


class FlavorUsageSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    capacity = serializers.IntegerField(help_text="GPUs on ready nodes")
    schedulable_capacity = serializers.IntegerField(
        help_text="GPUs on ready, uncordoned, undrained nodes, less those used outside gpuqueue"
    )
    allocated = serializers.IntegerField()
    pending_gpus = serializers.IntegerField()
    pending_jobs = serializers.IntegerField()
    running_jobs = serializers.IntegerField()
    teams = TeamUsageSerializer(many=True)


class UtilizationSampleSerializer(serializers.ModelSerializer):
    flavor = serializers.CharField(source="flavor.name", read_only=True)
    team = serializers.CharField(source="team.slug", read_only=True, allow_null=True, default=None)

    class Meta:
        model = UtilizationSample
        fields = ["at", "flavor", "team", "capacity", "allocated", "pending"]
        read_only_fields = fields


class MeTeamSerializer(serializers.Serializer):
    team = serializers.CharField()
    role = serializers.CharField()


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    is_site_admin = serializers.BooleanField()
    teams = MeTeamSerializer(many=True)
