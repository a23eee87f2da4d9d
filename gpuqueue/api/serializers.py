"""What the API reads and writes. The fields read the types; the rules and the writes are the
services' (validate_* and create/update call them), so they hold for the dashboard too."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpuqueue.api.activity_fields import GpuActivityField
from gpuqueue.api.array_summary_fields import ArraySummaryField
from gpuqueue.api.cached_fields import FieldsBoundOnce
from gpuqueue.api.fields import (
    DurationSecondsField,
    LookupField,
    StrictBooleanField,
    StrictCharField,
    StrictDictField,
    StrictIntegerField,
    reject_unknown_fields,
)
from gpuqueue.api.node_draining import DrainingField, NodeListSerializer
from gpuqueue.api.prediction_fields import RuntimePredictionField, StartBandField
from gpuqueue.core import topology_levels
from gpuqueue.core.gpu_resources import dra_resource_name, is_dra_resource
from gpuqueue.core.reason_text import describe_reason, reason_label
from gpuqueue.core.states import JobState
from gpuqueue.core.taints import toleration_errors
from gpuqueue.models import MAX_ID, Flavor, Job, JobEvent, Node, Quota, UtilizationSample
from gpuqueue.services.jobs import dependencies, gpu_share, job_spec, pod_spec
from gpuqueue.services.jobs import validation as v
from gpuqueue.services.jobs.submit import JOB_FIELDS
from gpuqueue.services.quotas.flavors import save_flavor
from gpuqueue.services.quotas.quotas import (
    DEFAULT_WEIGHT,
    QUOTA_BOUNDS,
    quota_errors,
    quota_field_errors,
    set_quota,
)
from teams.models import Team


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


def _by_rules(rules: Callable[[str, Any], list[str]], field: str) -> Callable[..., Any]:
    """A serializer's `validate_<field>`: the service's rules of `field`. Bounds and lengths
    are also declared on the fields, for the schema; DRF refuses by them first, in the same
    words."""

    def validate(serializer: serializers.Serializer, value: Any) -> Any:
        errors = rules(field, value)
        if errors:
            raise serializers.ValidationError(errors)
        return value

    return validate


def _bounds(table: Mapping[str, tuple[int, int]], field: str) -> dict[str, int]:
    """A number field's min_value and max_value, from a service's table of bounds."""
    lowest, highest = table[field]
    return {"min_value": lowest, "max_value": highest}


# --- Jobs ---------------------------------------------------------------------------------------


class VolumeSerializer(serializers.Serializer):
    """An existing PersistentVolumeClaim of the team's namespace, mounted in every worker."""

    claim = StrictCharField(max_length=253, help_text="the claim's name")
    mount_path = StrictCharField(
        max_length=pod_spec.MAX_MOUNT_PATH_CHARS,
        trim_whitespace=False,
        help_text="absolute; not under /dev/shm or /etc/gpuqueue",
    )
    read_only = StrictBooleanField(default=False)

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return dict(super().to_internal_value(data))


def _names(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=StrictCharField(max_length=253),
        required=False,
        default=list,
        max_length=pod_spec.MAX_SECRETS,
        help_text=help_text,
    )


def _per_worker(field: str, help_text: str) -> StrictIntegerField:
    return StrictIntegerField(
        **_bounds(job_spec.BOUNDS, field), required=False, allow_null=True, help_text=help_text
    )


def _job_ids(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=StrictIntegerField(min_value=1),
        required=False,
        default=list,
        max_length=dependencies.MAX_DEPENDENCIES,
        help_text=help_text + " Job ids of your teams.",
    )


class JobSubmitSerializer(serializers.Serializer):
    """A submission. Its fields read the types; the rules, every one that Kubernetes or the
    engine would refuse later, are gpuqueue.services.jobs.job_spec's, which the dashboard's form
    calls too. A bad request changes nothing and says which field is wrong."""

    team = LookupField(
        find=lambda context, slug: job_spec.find_team(_user_in(context), slug),
        required=False,
        help_text="Team slug; may be left out by a user who belongs to exactly one team.",
        error_messages={
            "does_not_exist": job_spec.UNKNOWN_TEAM,
            "invalid": "Must be a team slug.",
        },
    )
    flavor = LookupField(
        find=lambda context, name: job_spec.find_flavor(name),
        error_messages={
            "does_not_exist": job_spec.UNKNOWN_FLAVOR,
            "invalid": "Must be a flavor name.",
        },
    )
    name = StrictCharField(
        required=False, max_length=job_spec.NAME_MAX_CHARS, help_text="Defaults from the image."
    )
    image = StrictCharField(max_length=job_spec.IMAGE_MAX_CHARS, trim_whitespace=False)
    command = serializers.ListField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=list,
    )
    env = StrictDictField(required=False, default=dict)
    labels = StrictDictField(required=False, default=dict)
    annotations = StrictDictField(required=False, default=dict)
    workers = StrictIntegerField(
        **_bounds(job_spec.BOUNDS, "workers"), default=job_spec.DEFAULTS["workers"]
    )
    gpus_per_worker = StrictIntegerField(
        **_bounds(job_spec.BOUNDS, "gpus_per_worker"), default=job_spec.DEFAULTS["gpus_per_worker"]
    )
    gpu_milli = StrictIntegerField(
        **_bounds(job_spec.BOUNDS, "gpu_milli"),
        default=job_spec.DEFAULTS["gpu_milli"],
        help_text="Thousandths of one GPU per worker, on a shared flavor, in whole slices "
        "(250 of 4 slices per GPU); 0: whole GPUs.",
    )
    gpu_memory_mib = StrictIntegerField(
        **_bounds(job_spec.BOUNDS, "gpu_memory_mib"),
        required=False,
        allow_null=True,
        help_text="GPU memory per worker instead of gpu_milli, on a shared flavor that tells "
        "its GPUs' memory: the fewest whole slices that hold it.",
    )
    gpu_models = serializers.ListField(
        child=StrictCharField(max_length=gpu_share.GPU_MODEL_MAX_CHARS),
        required=False,
        default=list,
        max_length=gpu_share.MAX_GPU_MODELS,
        help_text="Run only on nodes of these GPU models (their nvidia.com/gpu.product "
        "label); empty: any.",
    )
    topology_level = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=topology_levels.MAX_KEY_CHARS,
        help_text="One of the flavor's topology levels (a node label key, e.g. a rack label "
        "or nvidia.com/gpu.clique): all workers in one domain of it; empty: anywhere.",
    )
    topology_required = StrictBooleanField(
        default=job_spec.DEFAULTS["topology_required"],
        help_text="Wait until one domain of topology_level holds the whole gang (default: "
        "only prefer one, then the next level out, then anywhere).",
    )
    priority = StrictIntegerField(
        **_bounds(job_spec.BOUNDS, "priority"), default=job_spec.DEFAULTS["priority"]
    )
    preemptible = StrictBooleanField(default=job_spec.DEFAULTS["preemptible"])
    checkpoint_grace_seconds = DurationSecondsField(
        **_bounds(job_spec.BOUNDS, "checkpoint_grace_seconds"), required=False
    )
    max_runtime_seconds = DurationSecondsField(
        **_bounds(job_spec.BOUNDS, "max_runtime_seconds"), required=False, allow_null=True
    )
    expected_runtime_seconds = DurationSecondsField(
        **_bounds(job_spec.BOUNDS, "expected_runtime_seconds"), required=False, allow_null=True
    )
    cpu_millicores = _per_worker(
        "cpu_millicores", "CPU request per worker; defaults from the flavor, per GPU."
    )
    cpu_limit_millicores = _per_worker("cpu_limit_millicores", "Default: no CPU limit.")
    memory_mib = _per_worker(
        "memory_mib", "Memory request per worker; defaults from the flavor, per GPU."
    )
    memory_limit_mib = _per_worker("memory_limit_mib", "Default: the request.")
    shm_mib = _per_worker("shm_mib", "Size of /dev/shm; default: half the memory request.")
    volumes = serializers.ListField(
        child=VolumeSerializer(), required=False, default=list, max_length=pod_spec.MAX_VOLUMES
    )
    image_pull_secrets = _names("Secrets of the team's namespace to pull the image with.")
    env_from_secrets = _names("Secrets of the team's namespace whose keys become variables.")
    priority_class = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=253,
        help_text="A Kubernetes PriorityClass among those the site allows.",
    )
    service_account = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=253,
        help_text="A ServiceAccount of the team's namespace; its token is mounted.",
    )

    after_ok = _job_ids("Start only after each of these jobs succeeded.")
    after_any = _job_ids("Start only after each of these jobs ended, however.")
    after_not_ok = _job_ids("Start once any of these jobs failed or was cancelled.")
    keep_if_unmet = StrictBooleanField(
        default=False,
        help_text="When a dependency can no longer be met, stay pending (default: cancelled).",
    )

    validate_name = _by_rules(job_spec.field_errors, "name")
    validate_image = _by_rules(job_spec.field_errors, "image")
    validate_command = _by_rules(job_spec.field_errors, "command")
    validate_env = _by_rules(job_spec.field_errors, "env")
    validate_labels = _by_rules(job_spec.field_errors, "labels")
    validate_annotations = _by_rules(job_spec.field_errors, "annotations")
    validate_workers = _by_rules(job_spec.field_errors, "workers")
    validate_gpus_per_worker = _by_rules(job_spec.field_errors, "gpus_per_worker")
    validate_gpu_milli = _by_rules(job_spec.field_errors, "gpu_milli")
    validate_gpu_memory_mib = _by_rules(job_spec.field_errors, "gpu_memory_mib")
    validate_gpu_models = _by_rules(job_spec.field_errors, "gpu_models")
    validate_topology_level = _by_rules(job_spec.field_errors, "topology_level")
    validate_priority = _by_rules(job_spec.field_errors, "priority")
    validate_checkpoint_grace_seconds = _by_rules(job_spec.field_errors, "checkpoint_grace_seconds")
    validate_max_runtime_seconds = _by_rules(job_spec.field_errors, "max_runtime_seconds")
    validate_expected_runtime_seconds = _by_rules(job_spec.field_errors, "expected_runtime_seconds")
    validate_cpu_millicores = _by_rules(job_spec.field_errors, "cpu_millicores")
    validate_cpu_limit_millicores = _by_rules(job_spec.field_errors, "cpu_limit_millicores")
    validate_memory_mib = _by_rules(job_spec.field_errors, "memory_mib")
    validate_memory_limit_mib = _by_rules(job_spec.field_errors, "memory_limit_mib")
    validate_shm_mib = _by_rules(job_spec.field_errors, "shm_mib")
    validate_volumes = _by_rules(job_spec.field_errors, "volumes")
    validate_image_pull_secrets = _by_rules(job_spec.field_errors, "image_pull_secrets")
    validate_env_from_secrets = _by_rules(job_spec.field_errors, "env_from_secrets")
    validate_priority_class = _by_rules(job_spec.field_errors, "priority_class")
    validate_service_account = _by_rules(job_spec.field_errors, "service_account")

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        checked = job_spec.check_whole(_user(self), attrs)
        if not checked.ok:
            raise serializers.ValidationError(checked.errors)
        refused = dependencies.dependency_errors(_user(self), dependencies.Dependencies.of(attrs))
        if refused:
            raise serializers.ValidationError(refused)
        return checked.values


def _checked(value: Any, rule: Any) -> Any:
    errors = rule(value)
    if errors:
        raise serializers.ValidationError(errors)
    return value


class JobSourceSerializer(serializers.Serializer):
    """The user's own Kubernetes object a job mirrors (docs/kubernetes.md, "Your own Jobs
    through the queue")."""

    kind = serializers.CharField(read_only=True)
    namespace = serializers.CharField(read_only=True)
    name = serializers.CharField(read_only=True)


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
    placement_domain = serializers.CharField(
        read_only=True,
        help_text="The topology domain the gang was placed in, label=value (the innermost of "
        "its flavor's levels that holds it, from its own level out); empty: none.",
    )
    gpu_models = serializers.ListField(child=serializers.CharField(), read_only=True)
    gpu_devices = serializers.ListField(
        child=serializers.ListField(),
        read_only=True,
        help_text="A fractional job's [node, GPU index] per worker, as gpuqueue packed them "
        "(its model of the node: the device plugin picks the physical GPU).",
    )
    volumes = VolumeSerializer(many=True, read_only=True)
    image_pull_secrets = serializers.ListField(child=serializers.CharField(), read_only=True)
    env_from_secrets = serializers.ListField(child=serializers.CharField(), read_only=True)
    pending_reason = serializers.JSONField(
        read_only=True,
        allow_null=True,
        help_text="The engine's reason as data: {code, numbers, job_ids}.",
    )
    pending_reason_text = serializers.SerializerMethodField(
        help_text="The pending reason as one sentence with numbers (null unless PENDING)."
    )
    pending_reason_label = serializers.SerializerMethodField(
        help_text="The pending reason as one word for lists: Resources, TeamQueue, Limit, "
        "NeverUnderLimit, NewerTeamJobs, OlderTeamJob, NoQuota, Guarantee, FairShare, Reclaim, "
        "Preempting, Priority, Reserved, NeverFits, Topology, BackOff, Dependency, "
        "DependencyNeverMet, ArrayLimit or Cycle "
        "(null unless PENDING)."
    )
    idempotency_key = serializers.CharField(read_only=True, allow_null=True)
    runtime_prediction = RuntimePredictionField()
    start_band = StartBandField()
    gpu_activity = GpuActivityField()
    array_summary = ArraySummaryField()
    source = JobSourceSerializer(
        read_only=True,
        allow_null=True,
        help_text="The Kubernetes object (a labelled Job) the job mirrors; null for a job "
        "submitted through gpuqueue.",
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "source",
            "team",
            "user",
            "flavor",
            "gpus",
            *JOB_FIELDS,  # what a submission sets
            "idempotency_key",
            "array",
            "array_index",
            "array_summary",
            "hold",
            "keep_if_unmet",
            "state",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "placement",
            "placement_domain",
            "pod_sets",
            "pod_nodes",
            "gpu_devices",
            "pending_reason",
            "pending_reason_text",
            "pending_reason_label",
            "queue_position",
            "cluster_position",
            "estimated_start",
            "start_band",
            "runtime_prediction",
            "attempts",
            "gpu_activity",
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

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_pending_reason_label(self, job: Job) -> str | None:
        return reason_label(job.pending_reason) if job.state == JobState.PENDING else None


class DependencyLinkSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=dependencies.KINDS)
    state = serializers.CharField()
    name = serializers.CharField()


class JobDetailSerializer(JobSerializer):
    """For the schema: one job as GET /jobs/{id}/ answers (gpuqueue/services/jobs/dependencies.py
    `links`)."""

    depends_on = DependencyLinkSerializer(many=True, read_only=True)
    dependents = DependencyLinkSerializer(many=True, read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "depends_on", "dependents"]
        read_only_fields = fields


class JobEventSerializer(FieldsBoundOnce, serializers.ModelSerializer):
    details = serializers.JSONField(read_only=True)

    class Meta:
        model = JobEvent
        fields = ["id", "at", "from_state", "to_state", "reason", "actor", "details"]
        read_only_fields = fields


# --- Flavors, quotas, nodes ---------------------------------------------------------------------


def _profile_id(help_text: str) -> StrictIntegerField:
    return StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_ID, help_text=help_text
    )


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
    run_as_user = _profile_id("The uid workers run as; null: the image's. 0 needs allow_root.")
    run_as_group = _profile_id("The primary gid workers run as; null: the image's.")
    fs_group = _profile_id("The group that owns the workers' volumes; null: none set.")
    allow_root = StrictBooleanField(
        required=False,
        help_text="Let workers run as root (runAsNonRoot left out): admitted by a namespace "
        "whose Pod Security level is baseline, refused by one that enforces restricted.",
    )
    shareable = StrictBooleanField(
        required=False,
        help_text="Jobs may ask a fraction of one GPU: the resource is the device plugin's "
        "shared one (time-slicing or MPS replicas), slices_per_gpu of it per GPU; on a DRA "
        "flavor the fractions on one device share one ResourceClaim (sharing_strategy).",
    )
    sharing_strategy = serializers.ChoiceField(
        choices=["TimeSlicing", "MPS"],
        required=False,
        help_text="How NVIDIA's DRA driver shares a device among the pods of its shared claim "
        "(a shareable DRA flavor's).",
    )
    slices_per_gpu = StrictIntegerField(
        required=False, allow_null=True, min_value=2, max_value=1000
    )
    gpu_memory_mib = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=gpu_share.MAX_GPU_MEMORY_MIB
    )

    topology_levels = serializers.JSONField(
        required=False,
        default=list,
        help_text="Node label keys, outermost first (a block or spine label, a rack label, "
        "nvidia.com/gpu.clique, kubernetes.io/hostname last), as Kueue's Topology "
        'spec.levels; [{"nodeLabel": key}] is taken too.',
    )
    fabric = serializers.JSONField(
        required=False,
        default=dict,
        help_text="What workers need besides GPUs to reach the network: resources (device "
        "name -> count per worker), capabilities (IPC_LOCK, SYS_RESOURCE), annotations "
        "(e.g. Multus networks), runtime_class, volumes ({name, host_path under an allowed "
        "path, mount_path, read_only}).",
    )

    class Meta:
        model = Flavor
        fields = [
            "id",
            "name",
            "resource_name",
            "node_selector",
            "tolerations",
            "topology_levels",
            "fabric",
            "cpu_millicores_per_gpu",
            "memory_mib_per_gpu",
            "max_cpu_millicores_per_worker",
            "max_memory_mib_per_worker",
            "description",
            "run_as_user",
            "run_as_group",
            "fs_group",
            "allow_root",
            "shareable",
            "slices_per_gpu",
            "gpu_memory_mib",
            "sharing_strategy",
            "device_class",
            "device_selector",
        ]
        read_only_fields = ["id"]
        # A DRA flavor's resource name is gpuqueue's own (set on save).
        extra_kwargs = {"resource_name": {"required": False}}

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

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """A resource name, unless the flavor's GPUs are DRA devices (a device class)."""
        device_class = attrs.get(
            "device_class", self.instance.device_class if self.instance is not None else ""
        )
        if device_class:
            attrs["resource_name"] = dra_resource_name(
                attrs.get("name", self.instance.name if self.instance is not None else "")
            )
        elif not attrs.get("resource_name") and (
            self.instance is None or is_dra_resource(self.instance.resource_name)
        ):
            raise serializers.ValidationError(
                {"resource_name": ["A resource name, or a device class for DRA devices."]}
            )
        return attrs

    def validate_node_selector(self, selector: dict[str, str]) -> dict[str, str]:
        return _checked(selector, v.label_errors)

    def validate_tolerations(self, tolerations: list[dict[str, str]]) -> list[dict[str, str]]:
        return _checked(tolerations, toleration_errors)

    def validate_topology_levels(self, levels: Any) -> list[str]:
        levels = topology_levels.normalized(levels)
        return list(_checked(levels, topology_levels.level_errors))

    def validate_fabric(self, fabric: Any) -> dict[str, Any]:
        if not isinstance(fabric, dict):
            raise serializers.ValidationError("A JSON object (see the field's description).")
        return fabric  # its rules are the flavor's (Flavor.fabric_errors), checked on save

    def create(self, validated_data: dict[str, Any]) -> Flavor:
        return save_flavor(_user(self), None, **validated_data)

    def update(self, instance: Flavor, validated_data: dict[str, Any]) -> Flavor:
        return save_flavor(_user(self), instance, **validated_data)


class QuotaSerializer(serializers.ModelSerializer):
    """A team's quota for a flavor. The rules are gpuqueue.services.quotas.quotas', which the
    dashboard's form calls too; writes go through its set_quota, whose verdict on
    oversubscription comes back in the write's response."""

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
    guarantee = StrictIntegerField(**_bounds(QUOTA_BOUNDS, "guarantee"))
    limit = StrictIntegerField(**_bounds(QUOTA_BOUNDS, "limit"))
    weight = serializers.FloatField(**_bounds(QUOTA_BOUNDS, "weight"), default=DEFAULT_WEIGHT)
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

    validate_guarantee = _by_rules(quota_field_errors, "guarantee")
    validate_limit = _by_rules(quota_field_errors, "limit")
    validate_weight = _by_rules(quota_field_errors, "weight")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is not None:
            for key in ("team", "flavor"):
                if key in attrs and attrs[key] != getattr(self.instance, key):
                    raise serializers.ValidationError({key: ["Cannot change; create a quota."]})
            for key in ("guarantee", "limit", "weight"):
                attrs.setdefault(key, getattr(self.instance, key))
        errors = quota_errors(
            attrs["guarantee"], attrs["limit"], attrs.get("weight", DEFAULT_WEIGHT)
        )
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def _save(self, team: Team, flavor: Flavor, attrs: dict[str, Any]) -> Quota:
        change = set_quota(
            _user(self),
            team,
            flavor,
            guarantee=attrs["guarantee"],
            limit=attrs["limit"],
            weight=attrs.get("weight", DEFAULT_WEIGHT),
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
    draining = DrainingField(
        help_text="GPUs that gpuqueue's terminating pods still hold here, by job and resource; "
        "jobs you may not read appear as one count per resource, naming no job"
    )
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
            "draining",
            "allocatable_cpu_millicores",
            "allocatable_memory_bytes",
            "allocatable_pods",
            "external_cpu_millicores",
            "external_memory_bytes",
            "external_pods",
            "labels",
            "gpu_model",
            "taints",
            "ready",
            "cordoned",
            "drained",
            "schedulable",
            "updated_at",
        ]
        read_only_fields = fields
        list_serializer_class = NodeListSerializer


# --- Utilization --------------------------------------------------------------------------------


class GpuCountField(serializers.FloatField):
    """GPUs: a whole number, or thousandths where fractional jobs hold parts of GPUs."""

    def to_representation(self, value: Any) -> float | int:
        gpus = round(float(value), 3)
        return int(gpus) if gpus.is_integer() else gpus


class TeamUsageSerializer(serializers.Serializer):
    team = serializers.CharField()
    allocated = GpuCountField(
        help_text="GPUs held by admitted/running/preempting jobs (a fraction of a GPU counts "
        "its thousandths)"
    )
    pending_gpus = GpuCountField()
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
    allocated = GpuCountField()
    pending_gpus = GpuCountField()
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
