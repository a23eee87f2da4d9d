"""Pure builders of the Kubernetes objects one attempt of a job becomes: a Secret with its token,
a headless Service for rendezvous, and an Indexed Job pinned to the planned nodes.

Plain dicts in the API's JSON shape (camelCase), so that they can be compared with golden files,
sent by the official client unchanged and validated through its models. No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuqueue.cluster.base import GPU_PRODUCT_LABEL, LaunchSpec
from gpuqueue.core.fabric import Fabric

# Labels that tie Kubernetes objects to gpuqueue jobs; the watcher and reconcile find them by
# these. Ours are applied over the user's labels so that a user cannot detach a workload.
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "gpuqueue"
LABEL_JOB_ID = "gpuqueue.dev/job-id"
LABEL_ATTEMPT = "gpuqueue.dev/attempt"
LABEL_TEAM = "gpuqueue.dev/team"
# The install that made the object (GPUQUEUE_INSTANCE): in every selector, so that two installs
# never list each other's objects.
LABEL_INSTANCE = "gpuqueue.dev/instance"
SELECTOR = f"{MANAGED_BY}={MANAGED_BY_VALUE}"
# An HMAC, keyed by a secret of the install, over what identifies the attempt (namespace, job,
# attempt, instance and the nonce its WorkloadRecord keeps): labels are hints anyone can write,
# this is what a relaunch checks before adopting an object it finds (gpuqueue.cluster.proof).
PROOF_ANNOTATION = "gpuqueue.dev/proof"

# The checkpoint protocol: the deadline (RFC 3339) is written as a pod annotation and reaches the
# workload through a downward-API file of the pod's annotations.
CHECKPOINT_ANNOTATION = "gpuqueue.dev/checkpoint-requested"
PODINFO_DIR = "/etc/gpuqueue/podinfo"
ANNOTATIONS_FILE = f"{PODINFO_DIR}/annotations"
TOKEN_KEY = "token"
CONTAINER = "worker"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# Pods are created gated and carry the plan; gpuqueue releases each to its one planned node
# (gpuqueue.cluster.gates), so the gang lands exactly as planned.
PLACEMENT_GATE = "gpuqueue.dev/placement"
PLACEMENT_ANNOTATION = "gpuqueue.dev/placement"
# A gang of several pod sets (a user's PyTorchJob or RayJob): which pod set a pod is of; each
# pod set's template carries its own part of the plan (gpuqueue.cluster.gates).
POD_SET_ANNOTATION = "gpuqueue.dev/pod-set"
# A gang is requeued whole, after its checkpoint, by gpuqueue (a cordoned node under it is a
# preemption): autoscalers consolidating nodes must not evict one worker of it meanwhile.
NO_DISRUPTION_ANNOTATIONS: Mapping[str, str] = {
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    "karpenter.sh/do-not-disrupt": "true",
}
# The node lifecycle controller's taints for a node that is not ready or unreachable; a pod
# without a toleration of its own gets one of 300 s for each.
NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")

# Variables by which the NVIDIA container stack (nvidia-container-runtime and its hook, or the
# runtime's CDI mode) chooses the devices a container gets. Kubelet puts a device plugin's
# Allocate variables before the container's own `env` and `envFrom`, and the runtime keeps the
# last of equal names, so a job's value would replace the device plugin's list: with the
# toolkit's default (the variable honoured in unprivileged containers) NVIDIA_VISIBLE_DEVICES=all
# hands a 1-GPU worker every GPU of its node. The MIG variables give MIG configuration and
# monitoring, IMEX_CHANNELS cross-node memory channels, and the feature switches add device
# nodes (GPUDirect Storage, InfiniBand, NVSwitch, GDRCopy) that only the device plugin may turn
# on. Only the device plugin or DRA driver selects devices, never the job: these are refused in a
# job's environment (gpuqueue.services.jobs.validation).
# CUDA_VISIBLE_DEVICES is not among them: the CUDA runtime reads it inside the process, over
# the devices the container already has, so it can only narrow or reorder them.
# NVIDIA_DRIVER_CAPABILITIES and NVIDIA_REQUIRE_* choose driver libraries and checks, no device.
RESERVED_DEVICE_ENV = frozenset(
    {
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "NVIDIA_MIG_MONITOR_DEVICES",
        "NVIDIA_IMEX_CHANNELS",
        "NVIDIA_GDS",
        "NVIDIA_MOFED",
        "NVIDIA_NVSWITCH",
        "NVIDIA_GDRCOPY",
    }
)

# What gpuqueue sets in every container, after `envFrom`, so that no Secret's key can choose
# devices either (an explicit `env` entry wins over `envFrom`). "void" is the toolkit's "no
# devices from this variable": the device plugin's list then comes from the volume mounts
# (DEVICE_LIST_STRATEGY=volume-mounts, which the hook reads before the variable) or from CDI
# device names (cdi-annotations, cdi-cri), not from this variable. With DEVICE_LIST_STRATEGY=envvar
# the variable is the list, and the job's own value would be the one that counts, so those
# nodes cannot isolate GPUs and gpuqueue does not support them (docs/security.md). The other
# reserved names are refused but not pinned: a pinned value would replace the device plugin's
# own (it sets NVIDIA_GDS and NVIDIA_MOFED when so configured), and the MIG variables need
# CAP_SYS_ADMIN, which every worker drops.
PINNED_DEVICE_ENV: Mapping[str, str] = {"NVIDIA_VISIBLE_DEVICES": "void"}


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """What the manifests need beyond the job itself (from settings)."""

    gpu_taint: str = "nvidia.com/gpu"
    master_port: int = 29500
    public_url: str = "http://gpuqueue-web.gpuqueue.svc:8000"
    # Off only for nodes whose device plugin lists devices in NVIDIA_VISIBLE_DEVICES itself
    # (DEVICE_LIST_STRATEGY=envvar), where the pinned value would hide the GPUs: there an
    # allowed Secret that carries the variable can choose devices (PINNED_DEVICE_ENV).
    pin_visible_devices: bool = True
    # The PriorityClass of every worker unless the job names one (GPUQUEUE_K8S_PRIORITY_CLASS,
    # shipped by deploy/ with preemptionPolicy Never): high enough that kube-scheduler's own
    # preemption takes no worker of a gang for a pod gpuqueue did not plan. "" names none.
    priority_class: str = ""
    # How long a worker stays on a node that is not ready or unreachable before the node
    # lifecycle controller evicts it (GPUQUEUE_NODE_LOST_GRACE_SECONDS): the same grace that
    # gpuqueue gives the gang, instead of Kubernetes' default 300 s. None leaves the default.
    node_lost_grace_seconds: float | None = None
    # Kubernetes deletes a finished Job after this long even if gpuqueue never does (a backstop
    # behind GPUQUEUE_K8S_KEEP_FINISHED_SECONDS). None sets none.
    finished_ttl_seconds: int | None = None
    # A PodDisruptionBudget per gang (GPUQUEUE_K8S_GANG_PDB): `kubectl drain` and autoscalers
    # then wait for gpuqueue to checkpoint and requeue the gang instead of evicting part of it.
    gang_pdb: bool = False
    # Whether the cluster serves the Workload API's PodGroup (scheduling.k8s.io/v1beta1,
    # Kubernetes 1.37 with GenericWorkload): each gang then carries one, so that kube-scheduler
    # binds its pods all together or not at all, a second lock on gpuqueue's own (detected by
    # the backend, not a setting).
    pod_group: bool = False


def workload_name(job_id: int, attempt: int) -> str:
    """Deterministic per attempt, so creating twice is a 409 to adopt, and a new attempt never
    collides with a previous one that Kubernetes is still deleting. A DNS-1035 label."""
    return f"gq-{job_id}-{attempt}"


def token_secret_name(job_id: int, attempt: int) -> str:
    return f"{workload_name(job_id, attempt)}-token"


def claim_template_name(job_id: int, attempt: int) -> str:
    return f"{workload_name(job_id, attempt)}-gpus"


# The name of a DRA flavor's claim in each worker's pod and of its one device request.
DEVICE_CLAIM = "gpus"
# On a DRA worker's pod: {resource: devices} its claim asks (gpuqueue's own resource name), for
# the placement gate to count before it releases a gang (a claim's count is in its template).
DEVICES_ANNOTATION = "gpuqueue.dev/devices"


def owner_labels(spec: LaunchSpec) -> dict[str, str]:
    labels = {
        MANAGED_BY: MANAGED_BY_VALUE,
        LABEL_JOB_ID: str(spec.job_id),
        LABEL_ATTEMPT: str(spec.attempt),
        LABEL_TEAM: spec.team,
    }
    if spec.instance:
        labels[LABEL_INSTANCE] = spec.instance
    return labels


def selector(instance: str = "") -> str:
    """What lists and watches of gpuqueue's objects select: this install's only."""
    return f"{SELECTOR},{LABEL_INSTANCE}={instance}" if instance else SELECTOR


def selected(obj: Mapping[str, Any], selector: str) -> bool:
    """Whether `obj`'s labels match `selector`, a list of `key=value` (what `selector` makes):
    the objects a LIST with it would have answered."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(
        labels.get(key) == value
        for key, _, value in (term.partition("=") for term in selector.split(","))
    )


def attempt_selector(job_id: int, attempt: int, instance: str = "") -> str:
    return f"{selector(instance)},{LABEL_JOB_ID}={job_id},{LABEL_ATTEMPT}={attempt}"


def proof_annotations(spec: LaunchSpec) -> dict[str, str]:
    return {PROOF_ANNOTATION: spec.proof} if spec.proof else {}


def _metadata(
    spec: LaunchSpec, name: str, owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": spec.namespace,
        "labels": owner_labels(spec),
    }
    if annotations := proof_annotations(spec):
        metadata["annotations"] = annotations
    if owner is not None and (reference := owner_reference(owner)):
        metadata["ownerReferences"] = [reference]
    return metadata


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any] | None:
    """Owned by the attempt's Secret (created first): Kubernetes deletes the Service and the
    Job with it, whoever deletes it and whatever became of gpuqueue. None for an object without
    a uid (an API server always sets one; a test emulator may not)."""
    meta = owner.get("metadata") or {}
    if not meta.get("uid"):
        return None
    return {
        "apiVersion": owner.get("apiVersion", "v1"),
        "kind": owner.get("kind", "Secret"),
        "name": meta["name"],
        "uid": meta["uid"],
    }


def secret_manifest(
    spec: LaunchSpec, token: str, owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The per-attempt token the workload acknowledges its checkpoint with; it owns the
    attempt's Service and Job. A user's own object it admits owns it (`owner`): it goes
    with that object."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(spec, token_secret_name(spec.job_id, spec.attempt), owner),
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token},
    }


def has_service(spec: LaunchSpec) -> bool:
    """Workers find each other by the headless Service; a single worker has no one to find
    (its MASTER_ADDR is itself), so a one-worker attempt is a Secret and a Job only."""
    return spec.workers > 1


def service_manifest(spec: LaunchSpec, owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Headless, so that each worker has a stable DNS name `<job>-<index>.<service>`; it
    publishes not-ready addresses because workers must find the leader before they are ready."""
    name = workload_name(spec.job_id, spec.attempt)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, name, owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {
                LABEL_JOB_ID: str(spec.job_id),
                LABEL_ATTEMPT: str(spec.attempt),
            },
        },
    }


def pdb_manifest(spec: LaunchSpec, owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every worker must stay: an eviction (`kubectl drain`, an autoscaler) of any of them is
    refused while the gang runs, so that a drained node's gang is preempted with a checkpoint
    and requeued whole by gpuqueue (a cordoned node under a gang is a preemption), not cut in
    half. Owned by the attempt's Secret, so it goes with the attempt."""
    name = workload_name(spec.job_id, spec.attempt)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(spec, name, owner),
        "spec": {
            "minAvailable": spec.workers,
            "selector": {
                "matchLabels": {
                    LABEL_JOB_ID: str(spec.job_id),
                    LABEL_ATTEMPT: str(spec.attempt),
                }
            },
        },
    }


def claim_template_manifest(
    spec: LaunchSpec, owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A DRA flavor's ResourceClaimTemplate: each worker's pod gets a claim of its own from it
    (the resource claim controller makes them) for `resource_per_worker` devices of the
    flavor's DeviceClass that match its selector; kube-scheduler allocates them on the node the
    placement gate pins the pod to. Owned by the attempt's Secret, so it goes with the attempt."""
    exactly: dict[str, Any] = {
        "deviceClassName": spec.device_class,
        "allocationMode": "ExactCount",
        "count": spec.resource_per_worker,
    }
    if spec.device_selector.strip():
        exactly["selectors"] = [{"cel": {"expression": spec.device_selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": _metadata(spec, claim_template_name(spec.job_id, spec.attempt), owner),
        "spec": {
            "metadata": {"labels": owner_labels(spec)},
            "spec": {"devices": {"requests": [{"name": DEVICE_CLAIM, "exactly": exactly}]}},
        },
    }


def _devices_annotation(spec: LaunchSpec) -> dict[str, str]:
    """A DRA worker's devices, from its claim template, for the placement gate; none for a
    fraction's worker (its GPU's claim is shared: counted once, as allocated) or another."""
    if not spec.device_class or spec.shared_claim:
        return {}
    return {DEVICES_ANNOTATION: json.dumps({spec.resource_name: spec.resource_per_worker})}


def pod_group_manifest(spec: LaunchSpec, owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The gang's PodGroup: kube-scheduler admits its pods only when all `workers` of them can
    be placed at once (gang policy, minCount = workers), so a pod released alone, by hand or by
    a fault, waits for the rest instead of holding part of a gang's GPUs. Owned by the
    attempt's Secret, so it goes with the attempt."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": _metadata(spec, workload_name(spec.job_id, spec.attempt), owner),
        "spec": {"schedulingPolicy": {"gang": {"minCount": spec.workers}}},
    }


def planned_slots(spec: LaunchSpec, hostnames: Mapping[str, str]) -> list[list[Any]]:
    """The plan as `[[hostname, workers], ...]` in node order: completion index i runs in the
    i-th slot (gpuqueue.cluster.gates.planned_hostname)."""
    return [
        [hostnames.get(node, node), int(workers)]
        for node, workers in sorted(spec.placement.items())
        if int(workers) > 0
    ]


def _model_affinity(spec: LaunchSpec) -> list[dict[str, Any]]:
    """A job bound to GPU models asks nodes of those models of the kube-scheduler too: a lock
    besides the placement gate, should a gate be released to another node."""
    if not spec.gpu_models:
        return []
    return [{"key": GPU_PRODUCT_LABEL, "operator": "In", "values": sorted(spec.gpu_models)}]


def job_manifest(
    spec: LaunchSpec,
    options: ClusterOptions,
    hostnames: Mapping[str, str],
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Indexed Job: one pod per worker, created behind the placement gate and released by
    gpuqueue to its planned node (`hostnames`: node name to `kubernetes.io/hostname` label)."""
    name = workload_name(spec.job_id, spec.attempt)
    labels = {**{str(k): str(v) for k, v in spec.labels.items()}, **owner_labels(spec)}
    slots = planned_slots(spec, hostnames)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # The workload talks to gpuqueue with its job token, not to Kubernetes, unless the job
        # names a ServiceAccount of its team to act as.
        "automountServiceAccountToken": bool(spec.service_account),
        "securityContext": _pod_security_context(spec),
        # SIGTERM comes this long before SIGKILL: the grace of workloads that only handle SIGTERM.
        "terminationGracePeriodSeconds": spec.checkpoint_grace_seconds,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": sorted({host for host, _ in slots}),
                                },
                                *_model_affinity(spec),
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": worker_tolerations(spec, options),
        "containers": [_container(spec, options, name)],
        "volumes": [
            _shm_volume(spec),
            podinfo_volume(),
            *(
                {
                    "name": _volume_name(i),
                    "persistentVolumeClaim": {
                        "claimName": str(volume["claim"]),
                        "readOnly": bool(volume.get("read_only", False)),
                    },
                }
                for i, volume in enumerate(spec.volumes)
            ),
        ],
    }
    if spec.workers == 1 and len(slots) == 1:
        # One pod cannot land half-way: pinned to its node from the start, it needs no gate
        # (no release PATCH); kube-scheduler binds it once the room is there, and one it
        # cannot bind counts as a released worker that cannot be (gpuqueue.cluster.status).
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": slots[0][0]}
    else:
        pod_spec["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    _add_fabric(pod_spec, spec.fabric)
    if options.pod_group:
        pod_spec["schedulingGroup"] = {"podGroupName": name}
    if spec.device_class:
        # A fraction's worker names its GPU's shared claim; others get a claim each from the
        # attempt's template.
        source = (
            {"resourceClaimName": spec.shared_claim}
            if spec.shared_claim
            else {"resourceClaimTemplateName": claim_template_name(spec.job_id, spec.attempt)}
        )
        pod_spec["resourceClaims"] = [{"name": DEVICE_CLAIM, **source}]
        pod_spec["containers"][0]["resources"]["claims"] = [{"name": DEVICE_CLAIM}]
    if has_service(spec):
        pod_spec["subdomain"] = name  # the headless Service's: `<job>-<index>.<job>` resolves
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    if priority_class := spec.priority_class or options.priority_class:
        pod_spec["priorityClassName"] = priority_class
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        # A worker that fails fails the job at once (no retry of a gang member on its own).
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                # 1. A pod disrupted by its node (lost, drained, evicted) does not fail the Job;
                #    gpuqueue sees the broken gang, tears it down and requeues it.
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                # 2. Any worker exiting non-zero fails the whole Job.
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": CONTAINER,
                        "operator": "NotIn",
                        "values": [0],
                    },
                },
            ]
        },
        "template": {
            "metadata": {
                "labels": dict(labels),
                "annotations": {
                    **{str(k): str(v) for k, v in spec.annotations.items()},
                    **(spec.fabric.annotations or {}),  # the admin's over the job's
                    **NO_DISRUPTION_ANNOTATIONS,
                    PLACEMENT_ANNOTATION: json.dumps(slots, separators=(",", ":")),
                    **_devices_annotation(spec),
                },
            },
            "spec": pod_spec,
        },
    }
    if spec.max_runtime_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_seconds
    if options.finished_ttl_seconds is not None:
        job_spec["ttlSecondsAfterFinished"] = options.finished_ttl_seconds
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": spec.namespace,
        "labels": labels,
        "annotations": {"gpuqueue.dev/job-name": spec.name, **proof_annotations(spec)},
    }
    if owner is not None and (reference := owner_reference(owner)):
        metadata["ownerReferences"] = [reference]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def _add_fabric(pod_spec: dict[str, Any], fabric: Fabric) -> None:
    """The flavor's fabric on the worker: its devices beside the GPUs (requests = limits, as
    extended resources must be), its capabilities added to the dropped set, its runtime
    class and its host paths, mounted where it says."""
    container = pod_spec["containers"][0]
    resources = container["resources"]
    for name, count in fabric.resources.items():
        resources["requests"][name] = resources["limits"][name] = str(count)
    if fabric.capabilities:
        container["securityContext"]["capabilities"]["add"] = list(fabric.capabilities)
    if fabric.runtime_class:
        pod_spec["runtimeClassName"] = fabric.runtime_class
    for volume in fabric.volumes:
        name = f"fabric-{volume.name}"
        pod_spec["volumes"].append({"name": name, "hostPath": {"path": volume.host_path}})
        container["volumeMounts"].append(
            {"name": name, "mountPath": volume.mount_path, "readOnly": volume.read_only}
        )


def worker_tolerations(spec: LaunchSpec, options: ClusterOptions) -> list[dict[str, Any]]:
    """The GPU taint for scheduling only (NoSchedule): a NoExecute taint on a GPU node, a
    maintenance drain, still evicts. The not-ready and unreachable taints for the node-loss
    grace, so that the node lifecycle controller does not evict before gpuqueue decides. Then
    the flavor's own."""
    tolerations: list[dict[str, Any]] = [
        {"key": options.gpu_taint, "operator": "Exists", "effect": "NoSchedule"}
    ]
    if options.node_lost_grace_seconds is not None:
        seconds = max(int(-(-options.node_lost_grace_seconds // 1)), 0)  # rounded up
        tolerations += [
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
            for key in NODE_LOST_TAINTS
        ]
    tolerations += [{str(k): str(v) for k, v in t.items()} for t in spec.tolerations]
    return tolerations


def _pod_security_context(spec: LaunchSpec) -> dict[str, Any]:
    """Pod Security "restricted" by default, which a team namespace may enforce: non-root and
    the runtime's seccomp profile (each container also drops every capability and privilege
    escalation). The flavor's profile sets the ids; with root allowed runAsNonRoot is left out,
    which "baseline" admits and "restricted" refuses when the Job controller creates the pods."""
    context: dict[str, Any] = {} if spec.allow_root else {"runAsNonRoot": True}
    for key, value in (
        ("runAsUser", spec.run_as_user),
        ("runAsGroup", spec.run_as_group),
        ("fsGroup", spec.fs_group),
    ):
        if value is not None:
            context[key] = int(value)
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context


def _volume_name(index: int) -> str:
    return f"volume-{index}"


def _shm_volume(spec: LaunchSpec) -> dict[str, Any]:
    """/dev/shm in memory: the container runtime's 64 MiB default stalls PyTorch's data loaders
    and NCCL. The job's size, else half the worker's memory when it has some."""
    empty_dir: dict[str, Any] = {"medium": "Memory"}
    if spec.shm_mib is not None:
        empty_dir["sizeLimit"] = f"{spec.shm_mib}Mi"
    elif spec.memory_mib:
        empty_dir["sizeLimit"] = f"{spec.memory_mib // 2}Mi"
    return {"name": "dshm", "emptyDir": empty_dir}


def _resources(spec: LaunchSpec) -> dict[str, dict[str, str]]:
    """GPUs, CPU and memory. The memory limit is the request unless the job sets one: no
    surprise OOM kill because a neighbour used more. With CPU and memory limits equal to the
    requests the pod is Guaranteed QoS, the last evicted."""
    gpus = str(spec.resource_per_worker)
    # A DRA flavor's GPUs come from the pod's claim (job_manifest), not from a resource.
    requests = {} if spec.device_class else {spec.resource_name: gpus}
    limits = dict(requests)
    if spec.cpu_millicores:
        requests["cpu"] = f"{spec.cpu_millicores}m"
    if spec.cpu_limit_millicores:
        limits["cpu"] = f"{spec.cpu_limit_millicores}m"
    if spec.memory_mib:
        requests["memory"] = f"{spec.memory_mib}Mi"
    memory_limit = spec.memory_mib if spec.memory_limit_mib is None else spec.memory_limit_mib
    if memory_limit:
        limits["memory"] = f"{memory_limit}Mi"
    return {"limits": limits, "requests": requests}


def _container(spec: LaunchSpec, options: ClusterOptions, name: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "env": _env(spec, options, name),
        "resources": _resources(spec),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "podinfo", "mountPath": PODINFO_DIR, "readOnly": True},
            *(
                {
                    "name": _volume_name(i),
                    "mountPath": str(volume["mount_path"]),
                    "readOnly": bool(volume.get("read_only", False)),
                }
                for i, volume in enumerate(spec.volumes)
            ),
        ],
    }
    if spec.env_from_secrets:
        # Variables set in `env` win over these, so a Secret cannot forge RANK either.
        container["envFrom"] = [{"secretRef": {"name": n}} for n in spec.env_from_secrets]
    if spec.command:
        container["command"] = [str(part) for part in spec.command]
    return container


def _env(spec: LaunchSpec, options: ClusterOptions, name: str) -> list[dict[str, Any]]:
    """The user's variables first, then gpuqueue's, which win (a user cannot forge RANK), and
    the pinned device variables, which win over `envFrom` too (a Secret cannot choose GPUs)."""
    ours: dict[str, dict[str, Any]] = {
        "WORLD_SIZE": {"value": str(spec.workers)},
        "RANK": {
            "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}
            }
        },
        "MASTER_ADDR": {
            "value": f"{name}-0.{name}.{spec.namespace}.svc" if has_service(spec) else "127.0.0.1"
        },
        "MASTER_PORT": {"value": str(options.master_port)},
        **checkpoint_env(spec, options),
    }
    if options.pin_visible_devices:
        ours.update({key: {"value": value} for key, value in PINNED_DEVICE_ENV.items()})
    # A job written before a name was reserved may still carry it: dropped, never passed on.
    env = [
        {"name": str(key), "value": str(value)}
        for key, value in sorted(spec.env.items())
        if key not in ours and key not in RESERVED_DEVICE_ENV
    ]
    env += [{"name": key, **value} for key, value in ours.items()]
    return env


def checkpoint_env(spec: LaunchSpec, options: ClusterOptions) -> dict[str, dict[str, Any]]:
    """What a workload needs for the checkpoint protocol (gpuqueue.client.workload): its job,
    where gpuqueue answers, the file of its pod's annotations and the attempt's token, read
    from the attempt's Secret."""
    return {
        "GPUQUEUE_JOB_ID": {"value": str(spec.job_id)},
        "GPUQUEUE_URL": {"value": options.public_url.rstrip("/")},
        "GPUQUEUE_ANNOTATIONS_FILE": {"value": ANNOTATIONS_FILE},
        "GPUQUEUE_JOB_TOKEN": {
            "valueFrom": {
                "secretKeyRef": {
                    "name": token_secret_name(spec.job_id, spec.attempt),
                    "key": TOKEN_KEY,
                }
            }
        },
    }


def podinfo_volume(name: str = "podinfo") -> dict[str, Any]:
    """The downward-API volume of the pod's annotations, where the checkpoint request shows."""
    return {
        "name": name,
        "downwardAPI": {
            "items": [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]
        },
    }


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def checkpoint_patch(deadline: datetime | None) -> dict[str, Any]:
    """The merge patch that asks a pod to checkpoint before `deadline`, or (None) withdraws
    the request: a merge patch's null deletes the annotation."""
    value = rfc3339(deadline) if deadline is not None else None
    return {"metadata": {"annotations": {CHECKPOINT_ANNOTATION: value}}}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def completion_index(pod: Mapping[str, Any]) -> str | None:
    """The worker a pod of an Indexed Job runs (its completion index, as text)."""
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION)


def attempt_of(obj: Mapping[str, Any]) -> tuple[int, int] | None:
    """(job id, attempt) of a gpuqueue-labelled object, or None for anything else. Checked here
    too because not every API server (nor the test emulator) honours label selectors."""
    labels = labels_of(obj)
    if labels.get(MANAGED_BY) != MANAGED_BY_VALUE:
        return None
    job_id, attempt = labels.get(LABEL_JOB_ID, ""), labels.get(LABEL_ATTEMPT, "")
    if not (job_id.isdigit() and attempt.isdigit()):
        return None
    return int(job_id), int(attempt)
