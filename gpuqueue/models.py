"""Flavors, quotas, nodes, jobs and their events: the state the admission cycle works on."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Cast

from gpuqueue.core import pod_sets
from gpuqueue.core.device_selector import selector_errors
from gpuqueue.core.fabric import fabric_errors
from gpuqueue.core.gpu_resources import dra_resource_name, is_dra_resource, is_gpu_resource
from gpuqueue.core.states import ACTIVE, FINAL, HOLDING, JobState
from gpuqueue.core.taints import EXISTS, schedulable_for, toleration_errors
from gpuqueue.core.topology_levels import level_errors, normalized
from teams.models import Team

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The largest uid or gid a pod may run as (a non-negative 32-bit signed integer).
MAX_ID = 2**31 - 1


class Flavor(models.Model):
    """A kind of schedulable GPU: a Kubernetes resource name plus a node label selector, or
    (with a device class) devices that Dynamic Resource Allocation hands out by ResourceClaim."""

    name = models.SlugField(max_length=63, unique=True)
    resource_name = models.CharField(
        max_length=253, help_text="e.g. nvidia.com/gpu or nvidia.com/mig-1g.10gb"
    )
    node_selector = models.JSONField(
        default=dict,
        blank=True,
        help_text="labels a node must carry, e.g. "
        '{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}',
    )
    tolerations = models.JSONField(
        default=list,
        blank=True,
        help_text="Kubernetes tolerations of its pods, for tainted nodes: "
        '[{"key": …, "operator": "Equal" or "Exists", "value": …, "effect": …}]',
    )
    # What each worker gets besides its GPUs, per GPU (0: nothing requested): CPU and memory
    # requests keep GPU pods out of BestEffort QoS, the first evicted under memory pressure.
    cpu_millicores_per_gpu = models.PositiveIntegerField(
        default=0, help_text="CPU per GPU in millicores, e.g. 12000 for 12 CPUs per H100"
    )
    memory_mib_per_gpu = models.PositiveIntegerField(
        default=0, help_text="memory per GPU in MiB (request and limit), e.g. 98304 (96 GiB)"
    )
    # The most a job may ask for one worker (requests and limits alike); null: no maximum.
    # The per-GPU defaults above are capped by them.
    max_cpu_millicores_per_worker = models.PositiveIntegerField(
        null=True, blank=True, help_text="the most CPU a worker may ask for, in millicores"
    )
    max_memory_mib_per_worker = models.PositiveIntegerField(
        null=True, blank=True, help_text="the most memory a worker may ask for, in MiB"
    )
    # What its workers need besides GPUs to reach the network (gpuqueue/core/fabric.py):
    # RDMA devices, IPC_LOCK, Multus networks, a runtime class, device files. Admins only.
    fabric = models.JSONField(
        default=dict,
        blank=True,
        help_text='e.g. {"resources": {"rdma/rdma_shared_device_a": 1}, '
        '"capabilities": ["IPC_LOCK"], '
        '"annotations": {"k8s.v1.cni.cncf.io/networks": "ib-a"}, "runtime_class": "nvidia", '
        '"volumes": [{"name": "ib", "host_path": "/dev/infiniband", '
        '"mount_path": "/dev/infiniband"}]}',
    )
    # A DRA flavor: its workers' GPUs come from ResourceClaims for devices of this DeviceClass
    # (gpu.nvidia.com, mig.nvidia.com), narrowed by the selector, a CEL expression over the
    # devices' attributes (gpuqueue.core.device_selector). Its resource_name is then gpuqueue's
    # own count of those devices (gpuqueue.core.gpu_resources.dra_resource_name).
    device_class = models.CharField(
        max_length=253,
        blank=True,
        help_text="a DeviceClass: its GPUs are DRA devices (empty: an extended resource)",
    )
    device_selector = models.TextField(
        blank=True,
        help_text="CEL over the devices, e.g. "
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
    )
    # Its topology levels, node label keys outermost first, as Kueue's Topology lists them
    # (gpuqueue/core/topology_levels.py): a job may require or prefer one domain of a level.
    topology_levels = models.JSONField(
        default=list,
        blank=True,
        help_text="node label keys, outermost first, e.g. "
        '["network.topology.nvidia.com/spine", "example.com/rack", "nvidia.com/gpu.clique", '
        '"kubernetes.io/hostname"]',
    )
    description = models.CharField(max_length=200, blank=True)
    # Idle GPUs (gpuqueue/services/accounting/gpu_activity.py): null takes GPUQUEUE_IDLE_* settings.
    idle_threshold_percent = models.FloatField(
        null=True, blank=True, help_text="a job below this GPU utilization is idle; empty: default"
    )
    idle_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="for this long before it is flagged; empty: default"
    )
    idle_policy = models.CharField(
        max_length=16,
        choices=[("flag", "only flag"), ("reclaim_first", "flag; reclaim idle borrowers first")],
        default="flag",
    )
    # The security profile of its workers. By default they pass Pod Security "restricted"
    # (non-root, RuntimeDefault seccomp, no privilege escalation, no capabilities) and run as
    # the image's user. Images built to run as root (NGC's, most of Docker Hub's) need
    # allow_root, which leaves runAsNonRoot out: a namespace that enforces "baseline" admits
    # such pods, one that enforces "restricted" refuses them.
    run_as_user = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(MAX_ID)],
        help_text="the uid workers run as; empty: the image's (0 needs allow root)",
    )
    run_as_group = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(MAX_ID)],
        help_text="the primary gid workers run as; empty: the image's",
    )
    fs_group = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(MAX_ID)],
        help_text="the group that owns the workers' volumes, so that they can write to them",
    )
    allow_root = models.BooleanField(
        default=False,
        help_text="let workers run as root (needs a namespace whose Pod Security level is "
        "baseline or privileged)",
    )
    # A shared flavor: its resource is the device plugin's shared one (time-slicing or MPS
    # replicas), `slices_per_gpu` of it per GPU, and a job may ask a whole number of slices
    # of one GPU (Job.gpu_milli) instead of whole GPUs. A shared DRA flavor's resource counts
    # devices; `slices_per_gpu` is then only how finely a job may ask.
    shareable = models.BooleanField(
        default=False, help_text="jobs may ask a fraction of one GPU (time-slicing or MPS)"
    )
    slices_per_gpu = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="replicas the device plugin makes of each GPU, e.g. 4; only when shareable",
    )
    gpu_memory_mib = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="memory of one GPU in MiB, when known: jobs may then ask GPU memory instead "
        "of a fraction",
    )
    # A shared DRA flavor: the fractions gpuqueue packs on one device share one ResourceClaim
    # for it, which asks NVIDIA's DRA driver for this sharing (gpuqueue/cluster/dra_sharing.py).
    sharing_strategy = models.CharField(
        max_length=16,
        choices=[("TimeSlicing", "time-slicing"), ("MPS", "MPS")],
        default="TimeSlicing",
        help_text="how NVIDIA's DRA driver shares a device among the pods of its claim; "
        "only a shareable DRA flavor uses it",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(run_as_user=0) | Q(allow_root=True),
                name="flavor_root_only_when_allowed",
            ),
            models.CheckConstraint(
                condition=Q(shareable=False, slices_per_gpu__isnull=True)
                | Q(shareable=True, slices_per_gpu__gte=2, slices_per_gpu__lte=1000),
                name="flavor_slices_only_when_shareable",
            ),
            models.CheckConstraint(
                condition=Q(gpu_memory_mib__isnull=True) | Q(gpu_memory_mib__gte=1),
                name="flavor_gpu_memory_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.tolerations is None:  # an emptied admin field
            self.tolerations = []
        if self.fabric is None:
            self.fabric = {}
        self.topology_levels = normalized(
            [] if self.topology_levels is None else self.topology_levels
        )
        errors = {
            **({"tolerations": found} if (found := toleration_errors(self.tolerations)) else {}),
            **({"fabric": found} if (found := self.fabric_errors()) else {}),
            **({"topology_levels": found} if (found := level_errors(self.topology_levels)) else {}),
            **self.security_profile_errors(),
            **self.sharing_errors(),
            **self.device_errors(),
        }
        if errors:
            raise ValidationError(errors)

    @property
    def is_dra(self) -> bool:
        return bool(self.device_class)

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.device_class:  # its devices are counted under a name of gpuqueue's own
            self.resource_name = dra_resource_name(self.name)
        super().save(*args, **kwargs)

    def device_errors(self) -> dict[str, list[str]]:
        """A DeviceClass name, a selector gpuqueue can evaluate, whole devices only, and
        gpuqueue's own resource names for DRA flavors alone."""
        errors: dict[str, list[str]] = {}
        if not self.device_class:
            if self.device_selector:
                errors["device_selector"] = ["Only a flavor with a device class has a selector."]
            if is_dra_resource(self.resource_name or ""):
                errors["resource_name"] = [
                    "Names under dra.gpuqueue.dev/ count DRA flavors' devices; set a device "
                    "class instead."
                ]
            return errors
        if not _DNS_SUBDOMAIN.match(self.device_class) or len(self.device_class) > 253:
            errors["device_class"] = [
                "A DeviceClass name: lowercase letters, digits, '-' and '.', e.g. gpu.nvidia.com."
            ]
        if found := selector_errors(self.device_selector or ""):
            errors["device_selector"] = found
        return errors

    def fabric_errors(self) -> list[str]:
        return fabric_errors(
            self.fabric,
            host_paths=settings.GPUQUEUE_FABRIC_HOST_PATHS,
            is_gpu=lambda name: name == self.resource_name or is_gpu_resource(name),
        )

    def security_profile_errors(self) -> dict[str, list[str]]:
        """Ids within what Kubernetes and Linux take, and root only when allowed."""
        errors: dict[str, list[str]] = {}
        for field in ("run_as_user", "run_as_group", "fs_group"):
            value = getattr(self, field)
            if value is not None and not 0 <= value <= MAX_ID:
                errors[field] = [f"An id from 0 to {MAX_ID}; got {value}."]
        if self.run_as_user == 0 and not self.allow_root:
            errors.setdefault("run_as_user", []).append(
                "Running as uid 0 is running as root: set allow_root too."
            )
        return errors

    @property
    def counts_slices(self) -> bool:
        """Its resource counts slices of GPUs (the device plugin's replicas); a DRA flavor's
        counts devices, shared or not."""
        return bool(self.shareable and self.slices_per_gpu and not self.device_class)

    def gpus_of(self, count: int) -> int:
        """Whole GPUs in `count` of its resource: a shared resource counts slices."""
        return count // self.slices_per_gpu if self.counts_slices and self.slices_per_gpu else count

    def gpus_held_by(self, count: int) -> int:
        """GPUs that `count` of its resource held by pods keeps from others: slices count as
        the fewest whole GPUs that hold them, rounded up (Kubernetes counts them per node; which
        GPU serves them is the device plugin's choice)."""
        if self.counts_slices and self.slices_per_gpu:
            return -(-count // self.slices_per_gpu)
        return count

    def slices_for(self, gpu_milli: int) -> int:
        """Slices of its shared resource that `gpu_milli` thousandths of a GPU take."""
        return -(-gpu_milli * (self.slices_per_gpu or 1) // 1000)

    def sharing_errors(self) -> dict[str, list[str]]:
        """Slices per GPU exactly when shared, from 2 to 1000."""
        if not self.shareable:
            if self.slices_per_gpu is not None:
                return {"slices_per_gpu": ["Only a shareable flavor has slices per GPU."]}
            return {}
        if self.slices_per_gpu is None or not 2 <= self.slices_per_gpu <= 1000:
            return {
                "slices_per_gpu": [
                    "A shareable flavor has from 2 to 1000 slices per GPU (the device "
                    "plugin's replicas of each GPU)."
                ]
            }
        return {}

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.node_selector.items())

    def fabric_fits(self, devices: Mapping[str, int]) -> bool:
        """Whether a node with these devices has what one worker's fabric asks for: a node
        without its network is not offered (kube-scheduler would never bind a worker there).
        How many workers a node's devices hold is not planned: fabric devices are shared
        ones, or one per GPU, in practice."""
        wanted = (self.fabric or {}).get("resources") or {}
        return all(int(devices.get(name, 0) or 0) >= count for name, count in wanted.items())

    def pod_tolerations(self) -> list[Mapping[str, str]]:
        """The tolerations its pods carry: its own and the GPU taint's, which the manifests
        add to every pod gpuqueue creates."""
        tolerations: list[Mapping[str, str]] = list(self.tolerations or ())
        if settings.GPUQUEUE_K8S_GPU_TAINT:
            tolerations.append({"key": settings.GPUQUEUE_K8S_GPU_TAINT, "operator": EXISTS})
        return tolerations

    def tolerates(self, taints: Iterable[Mapping[str, str]]) -> bool:
        """Whether its pods may be placed on a node with these taints (an untainted node, the
        common case in the snapshot's loop over nodes and flavors, at once)."""
        taints = list(taints)
        return not taints or schedulable_for(taints, self.pod_tolerations())


class Quota(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="quotas")
    guarantee = models.PositiveIntegerField(default=0, help_text="GPUs the team always gets")
    limit = models.PositiveIntegerField(default=0, help_text="GPUs the team never exceeds")
    weight = models.FloatField(default=1.0, help_text="share of idle capacity above guarantees")

    class Meta:
        ordering = ["team__slug", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "flavor"], name="one_quota_per_team_flavor"),
            models.CheckConstraint(condition=Q(guarantee__gte=0), name="quota_guarantee_nonneg"),
            models.CheckConstraint(
                condition=Q(limit__gte=F("guarantee")), name="quota_guarantee_within_limit"
            ),
            models.CheckConstraint(condition=Q(weight__gte=0), name="quota_weight_nonneg"),
        ]

    def __str__(self) -> str:
        return f"{self.team}/{self.flavor}: {self.guarantee}..{self.limit} w{self.weight:g}"


class ShareBalance(models.Model):
    """Time-based fair share (gpuqueue/scheduler/usage.py): GPU-seconds of fair share the team
    was entitled to less GPU-seconds it held, decayed with a half-life. Positive: it is owed;
    negative: it is in debt. Written only by the admission cycle, every row of a cycle with the
    same `updated_at`: the time the balances were advanced to."""

    # The unique (team, flavor) index serves lookups by team: no index of its own.
    team = models.ForeignKey(
        Team, on_delete=models.CASCADE, related_name="share_balances", db_index=False
    )
    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="share_balances")
    balance = models.FloatField(
        default=0.0, help_text="GPU-seconds; positive: owed, negative: debt"
    )
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["team__slug", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "flavor"], name="one_share_balance_per_team"),
        ]

    def __str__(self) -> str:
        return f"{self.team}/{self.flavor}: {self.balance / 3600:+.1f} GPU-h"


class Node(models.Model):
    name = models.CharField(max_length=253, unique=True)
    # Allocatable GPUs by Kubernetes resource name: {"nvidia.com/gpu": 8}.
    capacity = models.JSONField(default=dict)
    # Allocatable devices that are not GPUs, for flavors' fabrics: {"rdma/ib": 8}.
    devices = models.JSONField(default=dict, blank=True)
    # GPUs held by pods gpuqueue did not create, by resource name.
    used_externally = models.JSONField(default=dict, blank=True)
    # GPUs that gpuqueue's own terminating pods still hold, by job id and resource name:
    # {"7": {"nvidia.com/gpu": 8}} (not in used_externally).
    draining = models.JSONField(default=dict, blank=True)
    # What a worker needs besides GPUs: allocatable CPU, memory and pods (empty: not limited),
    # and what pods gpuqueue did not create request of them (its own jobs' requests are theirs).
    allocatable_cpu_millicores = models.PositiveBigIntegerField(null=True, blank=True)
    allocatable_memory_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    allocatable_pods = models.PositiveIntegerField(null=True, blank=True)
    external_cpu_millicores = models.PositiveBigIntegerField(default=0)
    external_memory_bytes = models.PositiveBigIntegerField(default=0)
    external_pods = models.PositiveIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    # The GPU model, from the label NVIDIA's GPU Feature Discovery sets (nvidia.com/gpu.product).
    gpu_model = models.CharField(max_length=63, blank=True)
    taints = models.JSONField(default=list, blank=True)
    ready = models.BooleanField(default=True)
    cordoned = models.BooleanField(default=False, help_text="unschedulable in Kubernetes")
    drained = models.BooleanField(default=False, help_text="closed to new work by a gpuqueue admin")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.cordoned and not self.drained

    def draining_gpus(self, resource_name: str) -> int:
        """GPUs of that resource gpuqueue's terminating pods still hold here, all jobs together."""
        return sum(
            int((by_name or {}).get(resource_name, 0) or 0) for by_name in self.draining.values()
        )


def gpu_share() -> models.Case:
    """A job's GPUs as quotas, usage and the ledger count them: a fractional job's workers
    count their thousandths of a GPU (`Job.gpu_share`, in SQL)."""
    return models.Case(
        models.When(
            gpu_milli__gt=0,
            then=Cast(F("workers") * F("gpu_milli"), models.FloatField()) / 1000.0,
        ),
        default=Cast(F("workers") * F("gpus_per_worker"), models.FloatField()),
        output_field=models.FloatField(),
    )


class JobHold(models.TextChoices):
    NONE = "", "offered to the engine"
    DEPENDENCIES = "dependencies", "waiting for the jobs it depends on"
    ARRAY_LIMIT = "array_limit", "waiting for a slot under its array's limit"


class JobQuerySet(models.QuerySet["Job"]):
    def visible_to(self, user: Any) -> JobQuerySet:
        """The one read filter for jobs: site admins see all, others their teams' jobs."""
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self.all()
        return self.filter(team__memberships__user=user)

    def active(self) -> JobQuerySet:
        return self.filter(state__in=ACTIVE)

    def holding(self) -> JobQuerySet:
        return self.filter(state__in=HOLDING)


class Job(models.Model):
    # No single-column indexes on team and user: job_team_recent and job_user_recent (and the
    # idempotency key's unique index) lead with them and serve the same lookups, and every
    # submission would pay for two more index insertions.
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs", db_index=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs", db_index=False
    )
    name = models.CharField(max_length=63)
    image = models.CharField(max_length=512)
    command = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    workers = models.PositiveIntegerField(default=1)
    gpus_per_worker = models.PositiveIntegerField(default=1)
    # 0: whole GPUs; 1..999: each worker takes that many thousandths of one GPU of a shared
    # flavor (gpus_per_worker is then 1).
    gpu_milli = models.PositiveSmallIntegerField(default=0)
    # Node GPU models the job may run on (Node.gpu_model); empty: any.
    gpu_models = ArrayField(models.CharField(max_length=63), default=list, blank=True)
    # One of its flavor's topology levels (Flavor.topology_levels): all its workers in one
    # domain of it, required or only preferred; "": anywhere.
    topology_level = models.CharField(max_length=317, blank=True, default="")
    topology_required = models.BooleanField(default=False)
    # The domain its gang was placed in, "label=value" (the innermost of its levels that holds
    # it, scheduler/topology.py), set at admission with the placement; "": none.
    placement_domain = models.CharField(max_length=400, blank=True, default="")
    # When it last came back to PENDING after holding GPUs (a preemption, a lost node, a start
    # that failed); null: pending since its submission. A gang's patience for one domain of its
    # preferred level counts from here (Policy.topology_patience_seconds).
    requeued_at = models.DateTimeField(null=True, blank=True)
    # A user's PyTorchJob or RayJob whose pod sets ask different GPUs per pod (a 1-GPU head
    # beside 8-GPU workers): its GPU pod sets in pod order, [{"name", "pods", "gpus",
    # "cpu_millicores", "memory_mib"}] (pods a count, the rest per pod). `workers` and
    # `gpus_per_worker` then count its GPUs in units of their greatest common divisor, so that
    # every sum of workers x GPUs stays its GPUs (quotas, usage, the ledger), and `placement`
    # is units per node. Null: every pod alike (gpuqueue/core/pod_sets.py).
    pod_sets = models.JSONField(null=True, blank=True)
    # With pod_sets: each pod's node in pod order, set at admission with the placement.
    pod_nodes = models.JSONField(null=True, blank=True)
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="jobs")
    priority = models.IntegerField(default=0)
    preemptible = models.BooleanField(default=True)
    checkpoint_grace_seconds = models.PositiveIntegerField(default=120)
    max_runtime_seconds = models.PositiveIntegerField(null=True, blank=True)
    expected_runtime_seconds = models.PositiveIntegerField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    # The request body's digest, so that the key reused with another body is refused.
    idempotency_body = models.CharField(max_length=64, null=True, blank=True)
    # The workload spec, per worker (gpuqueue/services/jobs/job_spec.py fills in the defaults at
    # submission; null on jobs older than these fields: the flavor's per-GPU values).
    cpu_millicores = models.PositiveIntegerField(null=True, blank=True, help_text="request")
    cpu_limit_millicores = models.PositiveIntegerField(
        null=True, blank=True, help_text="null: no CPU limit"
    )
    memory_mib = models.PositiveIntegerField(null=True, blank=True, help_text="request")
    memory_limit_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="null: the request"
    )
    shm_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="/dev/shm size; null: half the memory request"
    )
    # [{"claim": PVC name, "mount_path": "/data", "read_only": bool}]
    volumes = models.JSONField(default=list, blank=True)
    # Secret names only: gpuqueue never reads their values.
    image_pull_secrets = models.JSONField(default=list, blank=True)
    env_from_secrets = models.JSONField(default=list, blank=True)
    priority_class = models.CharField(max_length=253, blank=True)
    service_account = models.CharField(max_length=253, blank=True)
    # A task of an array (gpuqueue/services/jobs/arrays.py): its array and index; null otherwise.
    array = models.ForeignKey(
        "JobArray",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="tasks",
        db_index=False,
    )
    array_index = models.PositiveIntegerField(null=True, blank=True)
    # Why a PENDING job is kept out of the admission cycle's snapshot ("": it is not): waiting
    # for jobs it depends on, or for a slot under its array's %K. Only the cycle's hold phase
    # (gpuqueue/services/jobs/holds.py) clears it.
    hold = models.CharField(max_length=16, choices=JobHold.choices, blank=True, default="")
    # A dependency that can no longer be met leaves the job pending instead of cancelling it.
    keep_if_unmet = models.BooleanField(default=False)

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    submitted_at = models.DateTimeField(auto_now_add=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # {node name: workers on it}, set at admission and kept for history.
    placement = models.JSONField(default=dict, blank=True)
    # A fractional job's [node, GPU index] per worker, set at admission: gpuqueue's model of
    # the node (the device plugin picks the physical GPU).
    gpu_devices = models.JSONField(default=list, blank=True)
    # Why it waits and its places in line live in `Standing` (the properties below).
    estimated_start = models.DateTimeField(null=True, blank=True)
    # The last forecast (services/forecasts/runtime_history.py): {"early", "late": the estimated
    # start's band, ISO times or null; "why_none": why there is no estimate, or null; "runtime": the
    # runtime prediction it used, or null}. Written while PENDING.
    forecast = models.JSONField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0, help_text="launches so far")
    # Launches whose pods never all started (services/jobs/start_failures.py): each requeues the
    # job with a growing wait, and the last one allowed fails it.
    start_failures = models.PositiveIntegerField(default=0, help_text="launches that never started")
    # A PENDING job is not considered for admission before this time (backing off).
    not_before = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    message = models.TextField(blank=True, help_text="why it failed or was requeued")

    # Preemption with a checkpoint signal.
    checkpoint_requested_at = models.DateTimeField(null=True, blank=True)
    checkpoint_deadline = models.DateTimeField(null=True, blank=True)
    checkpoint_location = models.CharField(max_length=1024, blank=True)
    checkpoint_acked_at = models.DateTimeField(null=True, blank=True)
    checkpoint_token_hash = models.CharField(max_length=64, blank=True)
    # While PREEMPTING: the job the cycle preempted this one for (null: for no job, as a node
    # drain does), whose promise of these GPUs the next cycles keep. An id, not a foreign key:
    # the engine compares ids only, and deleting a job should not have to update others.
    preempted_for = models.BigIntegerField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(workers__gte=1), name="job_workers_positive"),
            models.CheckConstraint(
                condition=Q(gpus_per_worker__gte=1), name="job_gpus_per_worker_positive"
            ),
            models.CheckConstraint(condition=Q(state__in=JobState.values), name="job_state_valid"),
            models.CheckConstraint(
                condition=Q(gpu_milli=0) | Q(gpu_milli__lte=999, gpus_per_worker=1),
                name="job_gpu_milli_of_one_gpu",
            ),
            models.CheckConstraint(
                condition=Q(state__in=sorted(FINAL)) | Q(finished_at__isnull=True),
                name="job_finished_only_when_final",
            ),
            # One task per index of an array (its lookups by array go through this index too).
            models.UniqueConstraint(
                fields=["array", "array_index"],
                condition=Q(array__isnull=False),
                name="job_one_task_per_array_index",
            ),
            # A retried submission with the same key from the same user is the same job.
            models.UniqueConstraint(
                fields=["user", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="job_idempotency_key_per_user",
            ),
        ]
        indexes = [
            # The admission cycle's snapshot: WHERE state IN (PENDING, ADMITTED, RUNNING,
            # PREEMPTING); a partial index stays small however many finished jobs pile up.
            models.Index(
                fields=["state", "flavor"],
                condition=Q(state__in=sorted(ACTIVE)),
                name="job_active_by_state",
            ),
            # The jobs page: ORDER BY submitted_at DESC, id DESC LIMIT 51 (a site admin's first
            # page reads 51 rows instead of sorting every job; ~190 ms -> < 1 ms at 100,000).
            models.Index(fields=["-submitted_at", "-id"], name="job_recent"),
            # The dashboard's team job list: WHERE team_id IN (...) ORDER BY submitted_at DESC.
            models.Index(fields=["team", "-submitted_at"], name="job_team_recent"),
            # "My jobs": WHERE user_id = ? ORDER BY submitted_at DESC.
            models.Index(fields=["user", "-submitted_at"], name="job_user_recent"),
            # The cycle's hold phase: the few PENDING jobs held back, without reading the queue.
            models.Index(fields=["hold"], condition=~Q(hold=""), name="job_held"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name} ({self.state})"

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def pod_sets_text(self) -> str:
        """What each pod set of a job of pod sets of different asks asks, for people."""
        return pod_sets.describe(self.pod_sets or [])

    def placement_rows(self) -> list[tuple[str, int, int]]:
        """(node, workers or pods, GPUs) per node of its placement, by node name."""
        if self.pod_sets and self.pod_nodes:
            return pod_sets.pods_per_node(self.pod_nodes, self.pod_sets)
        return [
            (str(n), int(w), int(w) * self.gpus_per_worker)
            for n, w in sorted(self.placement.items())
        ]

    @property
    def gpu_share(self) -> float:
        """GPUs it holds for quotas and the ledger: a fractional job counts its thousandths."""
        if self.gpu_milli:
            return self.workers * self.gpu_milli / 1000
        return float(self.gpus)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL

    # What its `Standing` row says: None without one, or once it is not PENDING (an explain
    # that raced a cancel may leave one behind the door's delete). Lists read it with
    # select_related("standing").
    @property
    def pending_reason(self) -> Any:
        return getattr(self._standing(), "reason", None)

    @property
    def queue_position(self) -> int | None:
        return getattr(self._standing(), "queue_position", None)

    @property
    def cluster_position(self) -> int | None:
        return getattr(self._standing(), "cluster_position", None)

    def standing_written(self) -> None:
        """Its standing was written or deleted in the database: read again when asked for."""
        self._state.fields_cache.pop("standing", None)

    def _standing(self) -> Standing | None:
        if self.state != JobState.PENDING:
            return None
        try:
            return self.standing  # type: ignore[no-any-return]
        except Standing.DoesNotExist:
            Job.standing.related.set_cached_value(self, None)  # asked once, not per property
            return None


class Standing(models.Model):
    """Why a pending job waits and where it stands in line, as the admission cycle last
    explained it: a row of its own because the cycle rewrites tens of thousands of these after
    a wave, and rewriting the wide job rows (and their indexes) cost three times as much
    (docs/benchmarks.md). Only a PENDING job has one: the door (services/jobs/transitions.py)
    deletes it as the job moves on. No foreign key in the database, whose check would add a
    lookup per written row that the writes do not need: every write joins the PENDING job it
    is for, and Django deletes a job's standing with the job."""

    job = models.OneToOneField(
        Job,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="standing",
        db_constraint=False,
    )
    # The engine's reason as data: {"code": "no_capacity", "numbers": {...}, "job_ids": [...]}.
    reason = models.JSONField(null=True, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    cluster_position = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"standing of job {self.job_id}"


class JobArrayQuerySet(models.QuerySet["JobArray"]):
    def visible_to(self, user: Any) -> JobArrayQuerySet:
        """As `JobQuerySet.visible_to`: site admins see all, others their teams' arrays."""
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self.all()
        return self.filter(team__memberships__user=user)


class JobArray(models.Model):
    """One submission of N tasks of the same job (Slurm's --array=0-999%50): the tasks are
    ordinary jobs with `array` and `array_index` set; this row keeps what they share."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+", db_index=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    name = models.CharField(max_length=63)
    spec = models.CharField(max_length=200, help_text="the indices as given, e.g. 0-999:2%50")
    size = models.PositiveIntegerField(help_text="how many tasks")
    max_concurrent = models.PositiveIntegerField(
        null=True, blank=True, help_text="the most tasks holding GPUs at once; null: no cap"
    )
    values = models.JSONField(default=list, blank=True, help_text="one per task, or none")
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    idempotency_body = models.CharField(max_length=64, null=True, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True)

    objects = JobArrayQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="jobarray_idempotency_key_per_user",
            ),
        ]
        indexes = [models.Index(fields=["team", "-submitted_at"], name="jobarray_team_recent")]

    def __str__(self) -> str:
        return f"array {self.pk} {self.name} [{self.spec}]"


class DependencyKind(models.TextChoices):
    AFTER_OK = "after_ok", "after it succeeds"
    AFTER_ANY = "after_any", "after it ends"
    AFTER_NOT_OK = "after_not_ok", "after it fails or is cancelled"


class JobDependency(models.Model):
    """`job` waits for `upstream` (gpuqueue/services/jobs/dependencies.py)."""

    # The unique (job, upstream, kind) index serves lookups by job.
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="dependencies", db_index=False
    )
    upstream = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependents")
    kind = models.CharField(max_length=16, choices=DependencyKind.choices)

    class Meta:
        ordering = ["job", "upstream", "kind"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "upstream", "kind"], name="one_dependency_per_kind"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=DependencyKind.values), name="dependency_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} {self.upstream_id}"


class JobEvent(models.Model):
    """One state transition of a job: the job's timeline and the audit trail of the queue."""

    # jobevent_job_timeline (job, at) serves lookups by job: no index of its own.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events", db_index=False)
    at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=16, choices=JobState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=JobState.choices)
    reason = models.TextField(blank=True)
    actor = models.CharField(max_length=150, help_text="user:<name>, cycle or cluster")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            # A job's timeline: WHERE job_id = ? ORDER BY at.
            models.Index(fields=["job", "at"], name="jobevent_job_timeline"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state or '∅'} → {self.to_state}"


class ForecastSample(models.Model):
    """One kept forecast of a pending job: its band before the stretch learnt from such
    samples (gpuqueue/scheduler/band_misses.py; gpuqueue/services/forecasts/band_samples.py). A
    share of the pending jobs once an hour, the last week's."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    # The unique (hour, job) index also answers "is this hour sampled yet?" each forecast.
    hour = models.BigIntegerField(help_text="epoch hours: one sample per job and hour")
    sampled_at = models.DateTimeField(db_index=True)
    early_wait = models.FloatField(help_text="seconds from sampled_at to the band's early end")
    late_wait = models.FloatField(null=True, help_text="seconds to its late end; null: open")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["hour", "job"], name="one_forecast_sample_per_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} at {self.sampled_at:%Y-%m-%d %H:%M}"


class FairShare(models.Model):
    """The GPUs the last admission cycle's plan entitled a team (or department) to on a flavor:
    its guarantee plus its weighted part of idle GPUs, capped by its limit. Written only by the
    cycle (gpuqueue/services/quotas/fair_shares.py), so that the pages and /metrics show the numbers
    it admitted by instead of computing their own."""

    # The unique (team, flavor) index serves lookups by team: no index of its own.
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False)
    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="+")
    gpus = models.PositiveIntegerField()
    planned_at = models.DateTimeField()

    class Meta:
        ordering = ["team__slug", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "flavor"], name="one_fair_share_per_team"),
        ]

    def __str__(self) -> str:
        return f"{self.team}/{self.flavor}: {self.gpus} GPUs"


class UtilizationSample(models.Model):
    """GPUs allocated against capacity, per flavor (team NULL = whole cluster), every minute.

    The cluster's rows also keep that minute's idle iron
    (gpuqueue/services/accounting/utilization.py): "would have fitted" needs a node-by-node fit
    at the moment of sampling, which cannot be rebuilt later from totals.
    """

    at = models.DateTimeField()
    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="samples")
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="samples"
    )
    capacity = models.PositiveIntegerField()
    allocated = models.PositiveIntegerField()
    pending = models.PositiveIntegerField(default=0)
    # Cluster rows only (NULL on team rows): GPUs on schedulable nodes that neither gpuqueue
    # jobs nor outside pods hold, and GPUs of pending jobs that the engine held back for a
    # policy reason although their whole gang fitted on them. Idle iron = min(free, waiting_fit).
    free = models.PositiveIntegerField(null=True, blank=True)
    waiting_fit = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["at"]
        indexes = [
            # Utilization history charts: WHERE flavor_id = ? AND at >= ? ORDER BY at.
            models.Index(fields=["flavor", "team", "at"], name="sample_flavor_team_time"),
        ]


class SimulatedWorkload(models.Model):
    """A job running on the simulated cluster: the embedded mode's stand-in for a Kubernetes Job.

    It lives in the database so that the simulated cluster, like a real one, outlives restarts of
    gpuqueue's processes.
    """

    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    placement = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    ready_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    exit_code = models.IntegerField(default=0)
    checkpoint_requested_at = models.DateTimeField(null=True, blank=True)
    checkpoint_deadline = models.DateTimeField(null=True, blank=True)
    checkpoint_location = models.CharField(max_length=1024, blank=True)
    env = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job_id", "attempt"], name="one_workload_per_attempt"),
        ]


class UsageOutcome(models.TextChoices):
    """How an attempt stopped holding its GPUs ("" while it still holds them)."""

    OPEN = ""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"  # requeued after a preemption: its GPU-seconds count as lost
    REQUEUED = "requeued"  # requeued for another cause (a lost node, a gang never ready)


class UsageRecord(models.Model):
    """The GPU-hours ledger (gpuqueue/services/accounting/usage_ledger.py): the GPU-seconds one
    attempt of a job held within one clock hour, from its admission to the transition that
    released its GPUs. Kept forever: `job_id` is a plain integer, so rows outlive the job's."""

    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    hour = models.DateTimeField(help_text="the start of the clock hour (UTC)")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+", db_index=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+", db_index=False)
    gpus = models.PositiveIntegerField()
    gpu_seconds = models.FloatField(help_text="GPUs × seconds held within the hour")
    outcome = models.CharField(max_length=16, choices=UsageOutcome.choices, blank=True)
    # Where per-job GPU utilization is known (gpuqueue/services/accounting/gpu_activity.py):
    # GPU-seconds of work done (held × utilization) and GPU-seconds held below the idle threshold.
    used_gpu_seconds = models.FloatField(null=True, blank=True)
    idle_gpu_seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["hour", "job_id", "attempt"]
        constraints = [
            models.UniqueConstraint(
                fields=["job_id", "attempt", "hour"], name="one_usage_record_per_attempt_hour"
            ),
            models.CheckConstraint(condition=Q(gpu_seconds__gte=0), name="usage_seconds_nonneg"),
        ]
        indexes = [
            # Reports: WHERE hour >= ? AND hour < ? [AND team_id IN (...)] GROUP BY ...
            models.Index(fields=["hour", "team"], name="usage_hour_team"),
            models.Index(fields=["team", "hour"], name="usage_team_hour"),
            models.Index(fields=["user", "hour"], name="usage_user_hour"),
            # The minute's sweep of attempts still open (services/accounting/usage_ledger.py):
            # few rows.
            models.Index(fields=["job_id"], condition=Q(outcome=""), name="usage_open"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id}#{self.attempt} {self.hour:%Y-%m-%d %H}h: {self.gpu_seconds:.0f}"


class UsageTotal(models.Model):
    """Parts of the ledger's totals per team and flavor: their sums equal the sums of the
    UsageRecord rows, so /metrics reads a few rows instead of a ledger kept forever.

    Written only by PostgreSQL triggers on UsageRecord (migration 0010), which append each
    row change's difference, so no writer can forget it and inserts never wait on a shared row;
    `fold_usage_totals` (services/accounting/usage_ledger.py) merges the parts every minute."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+", db_index=False)
    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="+", db_index=False)
    gpu_seconds = models.FloatField()
    preempted_gpu_seconds = models.FloatField()
    idle_gpu_seconds = models.FloatField()


class JobActivity(models.Model):
    """The latest GPU utilization read for a job holding GPUs
    (gpuqueue/services/accounting/gpu_activity.py) and since when it has stayed below its
    flavor's idle threshold."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True, related_name="+")
    attempt = models.PositiveIntegerField()
    gpu_utilization = models.FloatField(help_text="percent, mean over the job's GPUs")
    measured_at = models.DateTimeField()
    source = models.CharField(max_length=16, help_text="prometheus or simulated")
    below_since = models.DateTimeField(null=True, blank=True)
    idle = models.BooleanField(default=False, help_text="below the threshold for long enough")

    class Meta:
        indexes = [models.Index(fields=["idle"], name="jobactivity_idle")]


class Install(models.Model):
    """Who this database belongs to: one row, written at the first start of a Kubernetes
    backend. `instance` is GPUQUEUE_INSTANCE (the label on every object the install makes);
    `uid` tells this database apart from another one that uses the same instance name. Each
    team namespace holds a marker that names the install owning it (gpuqueue/cluster/proof.py)."""

    instance = models.CharField(max_length=63)
    uid = models.UUIDField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"install {self.instance} ({self.uid})"


class WorkloadRecord(models.Model):
    """What gpuqueue made for one attempt of a job, the proof it checks every object against
    (gpuqueue/cluster/proof.py). Written before the launch (namespace and nonce: the HMAC on
    every object of the attempt is over them) and completed after it (the uids the API gave
    the attempt's Secret and Job). Kept after the job ends: an object of an attempt without a
    record is one this database did not make, and is never deleted as an orphan. `job_id` is a
    plain integer, so a record outlives its job's row."""

    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    namespace = models.CharField(max_length=63)
    nonce = models.CharField(max_length=64)
    secret_uid = models.CharField(max_length=64, blank=True)
    job_uid = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job_id", "attempt"], name="one_record_per_attempt")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id}#{self.attempt} in {self.namespace}"


class JobSource(models.Model):
    """The user's own Kubernetes object a job mirrors (gpuqueue/cluster/sources.py): a Job
    created with the queue label in its team's namespace. Its namespace, name and uid, recorded
    when it was mirrored, are what proves the object is that job's workload; labels never do."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="source")
    kind = models.CharField(max_length=63)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, unique=True)
    # Who created it, as the admission policy checked it (its gpuqueue.dev/user annotation).
    creator = models.CharField(max_length=253, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"
