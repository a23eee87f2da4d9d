"""Pure: the users' own Kubeflow PyTorchJobs and KubeRay RayJobs labelled with a queue.

Such an object is one gang of several pod sets (a PyTorchJob's Master and Worker replicas, a
RayJob's head and worker groups), each from its own pod template. gpuqueue reads them as one
job (`read_framework`):

1. The pod sets that ask for GPUs must ask one GPU resource. When each of their pods asks the
   same count, they are the job's workers (`workers` pods of `gpus_per_worker` GPUs). When the
   counts differ (a 1-GPU head beside 8-GPU workers), the job keeps its GPU pod sets
   (gpuqueue/core/pod_sets.py): the engine plans each pod with its own ask, and each pod
   set is released to its own pods' planned nodes (`pod_plans`).
2. The pod sets without GPUs (a Ray head, most often) ride along: each of their pods is pinned
   to the node of the gang's first GPU worker. The engine does not count their CPU and memory
   in its plan; the placement gate checks that the node has room for them (as for every pod)
   and holds the gang, saying why, when it has not.

Admission (`admission_patch`) writes, into every pod template, gpuqueue's labels, the
placement gate, the GPU nodes' tolerations, the pod set's own part of the plan (the
placement annotation, read by gpuqueue.cluster.gates with the pod-set annotation) and the
checkpoint protocol's variables, token and annotations file, and unsuspends the object; its
operator then makes the pods, gated. Stopping suspends it again (`suspend_patch`): the
operator deletes its pods.

For the rest of gpuqueue (proof, status, the gate) an admitted object is seen as a batch/v1
Job (`job_view`): its metadata, `parallelism` = every pod of every pod set, its finish as the
Job's Complete and Failed conditions, and the controllers of its pods (`CONTROLLERS_KEY`).
No I/O here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuqueue.cluster.base import LaunchSpec
from gpuqueue.cluster.gates import CPU, MEMORY, quantity
from gpuqueue.cluster.manifests import (
    NO_DISRUPTION_ANNOTATIONS,
    PLACEMENT_ANNOTATION,
    PLACEMENT_GATE,
    POD_SET_ANNOTATION,
    PODINFO_DIR,
    PROOF_ANNOTATION,
    ClusterOptions,
    checkpoint_env,
    owner_labels,
    planned_slots,
    podinfo_volume,
    worker_tolerations,
)
from gpuqueue.cluster.proof import CONTROLLERS_KEY
from gpuqueue.cluster.sources import (
    FLAVOR_LABEL,
    QUEUE_LABEL,
    USER_ANNOTATION,
    SourceShape,
    labelled_options,
)
from gpuqueue.core.gpu_resources import is_gpu_resource
from gpuqueue.core.pod_sets import units as pod_set_units

Obj = Mapping[str, Any]

KIND_PYTORCH = "PyTorchJob"
KIND_RAY = "RayJob"
KINDS = (KIND_PYTORCH, KIND_RAY)
# (group, version, plural) of each kind, for the custom objects API.
API = {
    KIND_PYTORCH: ("kubeflow.org", "v1", "pytorchjobs"),
    KIND_RAY: ("ray.io", "v1", "rayjobs"),
}
# The downward-API volume gpuqueue adds to every pod template for the checkpoint request
# (named apart from the user's volumes).
PODINFO_VOLUME = "gpuqueue-podinfo"
# A PyTorchJob's replica types in the order their pods take the plan's slots.
PYTORCH_ORDER = ("Master", "Worker")


@dataclass(frozen=True, slots=True)
class PodSet:
    """One pod template of the object and how many pods it makes."""

    name: str  # "Master", "Worker"; "head", or a Ray worker group's groupName
    count: int
    gpus: int  # per pod
    resource: str  # "" when it asks no GPU
    cpu: int  # millicores per pod
    memory: int  # bytes per pod
    path: tuple[Any, ...]  # where its template is in the object (keys and list indexes)


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def kind_of(obj: Obj) -> str:
    return str(obj.get("kind") or "")


def _get(obj: Any, path: Sequence[Any]) -> Any:
    for step in path:
        if obj is None:
            return None
        obj = obj[step] if isinstance(step, int) else (obj or {}).get(step)
    return obj


def _asks(template: Obj) -> tuple[dict[str, int], int, int, bool]:
    """GPUs by resource, CPU millicores and memory bytes of one pod of the template, and
    whether an init container asks GPUs."""
    pod = (template or {}).get("spec") or {}
    gpus: dict[str, int] = {}
    cpu = memory = 0
    for container in pod.get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for resource, amount in asked.items():
            if is_gpu_resource(resource):
                gpus[resource] = gpus.get(resource, 0) + quantity(amount, resource)
        requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        cpu += quantity(requests.get(CPU, 0), CPU)
        memory += quantity(requests.get(MEMORY, 0), MEMORY)
    init_gpus = any(
        is_gpu_resource(r)
        for c in pod.get("initContainers") or []
        for part in ("limits", "requests")
        for r in ((c.get("resources") or {}).get(part) or {})
    )
    return {r: n for r, n in gpus.items() if n}, cpu, memory, init_gpus


def _replicas(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def templates(obj: Obj) -> list[tuple[str, int, tuple[Any, ...]]]:
    """(pod set name, pods, path of its template) of every pod set, in plan order."""
    spec = obj.get("spec") or {}
    kind = kind_of(obj)
    if kind == KIND_PYTORCH:
        replicas = spec.get("pytorchReplicaSpecs") or {}
        names = [n for n in PYTORCH_ORDER if n in replicas] + sorted(
            n for n in replicas if n not in PYTORCH_ORDER
        )
        return [
            (
                name,
                _replicas((replicas[name] or {}).get("replicas"), 1),
                ("spec", "pytorchReplicaSpecs", name, "template"),
            )
            for name in names
        ]
    if kind == KIND_RAY:
        cluster = spec.get("rayClusterSpec") or {}
        out: list[tuple[str, int, tuple[Any, ...]]] = [
            ("head", 1, ("spec", "rayClusterSpec", "headGroupSpec", "template"))
        ]
        for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
            pods = _replicas(group.get("replicas"), _replicas(group.get("minReplicas"), 0))
            pods *= max(1, _replicas(group.get("numOfHosts"), 1))
            out.append(
                (
                    str(group.get("groupName") or f"group-{i}"),
                    pods,
                    ("spec", "rayClusterSpec", "workerGroupSpecs", i, "template"),
                )
            )
        return out
    return []


def pod_sets(obj: Obj) -> list[PodSet] | str:
    """Every pod set of the object, or why gpuqueue cannot read them."""
    out = []
    for name, count, path in templates(obj):
        template = _get(obj, path)
        if not isinstance(template, Mapping):
            return f"pod set {name} has no pod template"
        gpus, cpu, memory, init_gpus = _asks(template)
        if init_gpus:
            return f"an init container of pod set {name} asks for GPUs: only main containers may"
        if len(gpus) > 1:
            return f"pod set {name} asks GPUs of several resources ({', '.join(sorted(gpus))})"
        resource, per_pod = next(iter(gpus.items())) if gpus else ("", 0)
        out.append(PodSet(name, count, per_pod, resource, cpu, memory, path))
    if not out:
        return f"it is no {' or '.join(KINDS)} gpuqueue can read"
    return out


def is_suspended(obj: Obj) -> bool:
    spec = obj.get("spec") or {}
    if kind_of(obj) == KIND_PYTORCH:
        return bool((spec.get("runPolicy") or {}).get("suspend"))
    return bool(spec.get("suspend"))


def suspend_patch(obj: Obj, suspend: bool = True) -> dict[str, Any]:
    if kind_of(obj) == KIND_PYTORCH:
        return {"spec": {"runPolicy": {"suspend": suspend}}}
    return {"spec": {"suspend": suspend}}


def _condition(obj: Obj, kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def finished(obj: Obj) -> tuple[str, Mapping[str, Any]] | None:
    """("Complete" or "Failed", the condition that says so) once the object ended."""
    if kind_of(obj) == KIND_PYTORCH:
        for theirs, ours in (("Succeeded", "Complete"), ("Failed", "Failed")):
            if (found := _condition(obj, theirs)) is not None:
                return ours, found
        return None
    status = obj.get("status") or {}
    deployment = status.get("jobDeploymentStatus")
    if deployment == "Complete" or (deployment is None and status.get("jobStatus") == "SUCCEEDED"):
        ended = status.get("endTime") or ""
        return "Complete", {"type": "Complete", "status": "True", "lastTransitionTime": ended}
    if deployment in ("Failed", "ValidationFailed"):
        return "Failed", {
            "type": "Failed",
            "status": "True",
            "reason": status.get("reason") or "Failed",
            "message": status.get("message") or "",
            "lastTransitionTime": status.get("endTime") or "",
        }
    return None


def is_finished(obj: Obj) -> bool:
    return finished(obj) is not None


def read_framework(obj: Obj) -> SourceShape | str:
    """The job a labelled PyTorchJob or RayJob asks for (rules 1 and 2 of the module's
    docstring), or why gpuqueue cannot queue it (a sentence for its status annotation)."""
    sets = pod_sets(obj)
    if isinstance(sets, str):
        return sets
    meta = _meta(obj)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    spec = obj.get("spec") or {}
    if kind_of(obj) == KIND_RAY and spec.get("clusterSelector"):
        return "it runs on an existing RayCluster (clusterSelector): nothing for the queue to place"
    if kind_of(obj) == KIND_RAY and (spec.get("rayClusterSpec") or {}).get(
        "enableInTreeAutoscaling"
    ):
        return (
            "its RayCluster autoscales (enableInTreeAutoscaling): a gang has a fixed size; set"
            " each worker group's replicas instead"
        )
    with_gpus = [s for s in sets if s.resource and s.count > 0]
    if not with_gpus:
        return "its pods ask for no GPU: the queue is for GPU work, run it without the queue label"
    resources = {s.resource for s in with_gpus}
    if len(resources) > 1:
        return f"its pod sets ask GPUs of several resources ({', '.join(sorted(resources))}): one"
    shapes = {s.gpus for s in with_gpus}
    sets: tuple[dict[str, Any], ...] = ()
    workers, gpus_per_worker = sum(s.count for s in with_gpus), next(iter(shapes))
    if len(shapes) > 1:
        sets = tuple(
            {
                "name": s.name,
                "pods": s.count,
                "gpus": s.gpus,
                "cpu_millicores": s.cpu,
                "memory_mib": -(-s.memory // 2**20),
            }
            for s in with_gpus
        )
        workers, gpus_per_worker = pod_set_units(sets)
    try:
        priority, runtime = labelled_options(annotations)
    except ValueError as exc:
        return str(exc)
    first = _get(obj, with_gpus[0].path) or {}
    containers = (first.get("spec") or {}).get("containers") or []
    cpu = max(s.cpu for s in with_gpus)
    memory = max(s.memory for s in with_gpus)
    return SourceShape(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        team=str(labels.get(QUEUE_LABEL) or ""),
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        resource_name=next(iter(resources)),
        image=str((containers[0] if containers else {}).get("image") or ""),
        flavor=str(labels.get(FLAVOR_LABEL) or ""),
        priority=priority,
        max_runtime_seconds=runtime,
        user=str(annotations.get(USER_ANNOTATION) or ""),
        cpu_millicores=cpu or None,
        memory_mib=-(-memory // 2**20) if memory else None,
        kind=kind_of(obj),
        pod_sets=sets,
    )


def split_plan(slots: Sequence[Sequence[Any]], sets: Sequence[PodSet]) -> dict[str, list[Any]]:
    """Each pod set's part of the plan: the GPU pod sets take the slots in order, one per pod;
    a pod set without GPUs goes, every pod of it, to the first slot's node."""
    return pod_plans([str(host) for host, n in slots for _ in range(int(n))], sets)


def pod_plans(flat: Sequence[str], sets: Sequence[PodSet]) -> dict[str, list[Any]]:
    """Each pod set's part of the plan, given each GPU pod's host in pod order: the GPU pod
    sets' pods take them in order; a pod set without GPUs goes, every pod of it, to the first
    GPU pod's host. As runs of [host, pods]."""
    first = flat[0] if flat else ""
    out: dict[str, list[Any]] = {}
    at = 0
    for s in sets:
        if s.resource and s.count > 0:
            mine, at = flat[at : at + s.count], at + s.count
        else:
            mine = [first] * s.count
        runs: list[list[Any]] = []
        for host in mine:
            if runs and runs[-1][0] == host:
                runs[-1][1] += 1
            else:
                runs.append([host, 1])
        out[s.name] = runs
    return out


def _with_checkpoint(pod: dict[str, Any], env: Mapping[str, Mapping[str, Any]]) -> None:
    """Every main container of the pod gets the checkpoint protocol's variables (gpuqueue's
    win over the user's of the same name, as for gpuqueue's own Jobs) and the pod's
    annotations at PODINFO_DIR; the volume is written again at every admission."""
    volumes = [v for v in pod.get("volumes") or [] if v.get("name") != PODINFO_VOLUME]
    pod["volumes"] = [*volumes, podinfo_volume(PODINFO_VOLUME)]
    for container in pod.get("containers") or []:
        container["env"] = [
            *[e for e in container.get("env") or [] if e.get("name") not in env],
            *({"name": name, **value} for name, value in env.items()),
        ]
        mounts = [
            m
            for m in container.get("volumeMounts") or []
            if m.get("name") != PODINFO_VOLUME and m.get("mountPath") != PODINFO_DIR
        ]
        mount = {"name": PODINFO_VOLUME, "mountPath": PODINFO_DIR, "readOnly": True}
        container["volumeMounts"] = [*mounts, mount]


def _patched_template(
    template: Obj,
    labels: Mapping[str, str],
    plan: list[Any],
    pod_set: str,
    tolerations_wanted: Sequence[Obj],
    env: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The template with gpuqueue's labels, its part of the plan, the gate, the GPU nodes'
    tolerations and the checkpoint protocol (`_with_checkpoint`) added; the user's own gates,
    tolerations, labels and annotations stay."""
    out = copy.deepcopy(dict(template))
    meta = out.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        **NO_DISRUPTION_ANNOTATIONS,
        PLACEMENT_ANNOTATION: json.dumps(plan, separators=(",", ":")),
        POD_SET_ANNOTATION: pod_set,
    }
    pod = out.setdefault("spec", {})
    pod["schedulingGates"] = [
        *[g for g in pod.get("schedulingGates") or [] if g.get("name") != PLACEMENT_GATE],
        {"name": PLACEMENT_GATE},
    ]
    tolerations = list(pod.get("tolerations") or [])
    for toleration in tolerations_wanted:
        if toleration not in tolerations:
            tolerations.append(toleration)
    pod["tolerations"] = tolerations
    _with_checkpoint(pod, env)
    return out


def admission_patch(
    obj: Obj, spec: LaunchSpec, options: ClusterOptions, hostnames: Mapping[str, str]
) -> dict[str, Any]:
    """The merge patch that admits the suspended object as attempt `spec`: gpuqueue's labels
    and proof on it, every pod template patched (`_patched_template`; the token its
    containers read is in the attempt's Secret, made first), and unsuspended. The
    resourceVersion makes it a compare-and-swap. A RayJob's worker groups are a list, which a
    merge patch replaces whole: the list is written back with every group as it was but for
    its template."""
    sets = pod_sets(obj)
    if isinstance(sets, str):
        raise ValueError(sets)
    labels = owner_labels(spec)
    if spec.pod_nodes:  # pod sets of different asks: each pod to its own node
        plans = pod_plans([hostnames.get(node, node) for node in spec.pod_nodes], sets)
    else:
        plans = split_plan(planned_slots(spec, hostnames), sets)
    tolerations = worker_tolerations(spec, options)
    env = checkpoint_env(spec, options)
    patched = copy.deepcopy(dict(obj.get("spec") or {}))
    for s in sets:
        where = _get({"spec": patched}, s.path[:-1])
        where["template"] = _patched_template(
            where.get("template") or {}, labels, plans[s.name], s.name, tolerations, env
        )
    body: dict[str, Any] = {}
    if kind_of(obj) == KIND_PYTORCH:
        body = {"pytorchReplicaSpecs": patched["pytorchReplicaSpecs"]}
    else:
        body = {"rayClusterSpec": patched["rayClusterSpec"]}
    body.update(suspend_patch(obj, False)["spec"])
    if kind_of(obj) == KIND_PYTORCH:
        body["runPolicy"] = {**(patched.get("runPolicy") or {}), "suspend": False}
    return {
        "metadata": {
            "resourceVersion": _meta(obj).get("resourceVersion"),
            "labels": labels,
            "annotations": {PROOF_ANNOTATION: spec.proof} if spec.proof else {},
        },
        "spec": body,
    }


def job_view(obj: Obj) -> dict[str, Any]:
    """The object as the rest of gpuqueue reads a Job (the module's docstring)."""
    meta = dict(_meta(obj))
    sets = pod_sets(obj)
    pods = sum(s.count for s in sets) if not isinstance(sets, str) else 0
    status: dict[str, Any] = {}
    ended = finished(obj)
    if ended is not None:
        status["conditions"] = [{**ended[1], "type": ended[0], "status": "True"}]
        if ended[0] == "Complete" and ended[1].get("lastTransitionTime"):
            status["completionTime"] = ended[1]["lastTransitionTime"]
    if kind_of(obj) == KIND_PYTORCH:
        controllers = [[KIND_PYTORCH, str(meta.get("uid") or ""), str(meta.get("name") or "")]]
    else:
        cluster = str((obj.get("status") or {}).get("rayClusterName") or "")
        controllers = [["RayCluster", "", cluster]] if cluster else []
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"parallelism": pods, "suspend": is_suspended(obj)},
        "status": status,
        CONTROLLERS_KEY: controllers,
    }
