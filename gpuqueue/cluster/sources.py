"""Pure: the users' own batch/v1 Jobs that carry the queue label, read and admitted.

A Job created in a team namespace with `gpuqueue.dev/queue: <team>` and `spec.suspend: true`
(the admission policy in deploy/ refuses it otherwise) waits, suspended, with no pod, until
gpuqueue admits it. gpuqueue reads its shape from its pod template (`read_job`), mirrors it
as a job of the team, and on admission writes the plan into it (`admission_patch`): its own
labels and the placement gate on the pod template, the GPU nodes' tolerations, and
`suspend: false`, in one update while the Job is still suspended and has no start time (the
only time Kubernetes lets a Job's pod template change). The Job controller then makes the
pods, gated; the placement gate releases each to its planned node, as for gpuqueue's own Jobs.

What proves such a Job is the one a job mirrors: the namespace, the name and the uid recorded
when it was mirrored (gpuqueue.models.JobSource), never its labels. No I/O here.
"""

from __future__ import annotations

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
    PROOF_ANNOTATION,
    ClusterOptions,
    owner_labels,
    planned_slots,
    worker_tolerations,
)
from gpuqueue.core.gpu_resources import is_gpu_resource

Obj = Mapping[str, Any]

# What a user writes on their Job (the admission policy lets these through on a Job, and only
# there, and never lets them change afterwards).
QUEUE_LABEL = "gpuqueue.dev/queue"  # the team whose queue the Job waits in
FLAVOR_LABEL = "gpuqueue.dev/flavor"  # optional: the flavor's name
# optional annotation (a label value cannot be negative): an integer, as a submission's
PRIORITY_ANNOTATION = "gpuqueue.dev/priority"
MAX_RUNTIME_ANNOTATION = "gpuqueue.dev/max-runtime-seconds"  # optional
# optional: the creator's Kubernetes user name, which the policy checks against the request's
USER_ANNOTATION = "gpuqueue.dev/user"
# The label of a team namespace naming its team (set by the cluster admin, deploy/overlays).
NAMESPACE_TEAM_LABEL = "gpuqueue.dev/team"
# What gpuqueue writes back: where the job stands, in a sentence (`kubectl get -o wide` and
# `kubectl describe` show it), and the gpuqueue job it became.
STATUS_ANNOTATION = "gpuqueue.dev/status"
JOB_ANNOTATION = "gpuqueue.dev/job"
KIND_JOB = "Job"


@dataclass(frozen=True, slots=True)
class SourceShape:
    """What a labelled Job asks, read from its pod template."""

    namespace: str
    name: str
    uid: str
    team: str  # the queue label's value
    workers: int
    gpus_per_worker: int
    resource_name: str
    image: str
    flavor: str = ""  # FLAVOR_LABEL; "": the one flavor of its GPU resource
    priority: int | None = None
    max_runtime_seconds: int | None = None
    user: str = ""  # USER_ANNOTATION
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    kind: str = KIND_JOB
    # Pod sets that ask different GPUs per pod (gpuqueue/core/pod_sets.py): each GPU pod set's
    # {"name", "pods", "gpus", "cpu_millicores", "memory_mib"}; `workers` and
    # `gpus_per_worker` then count its GPUs in units. Empty: every GPU pod alike.
    pod_sets: tuple[dict[str, Any], ...] = ()


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def is_suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def is_finished(job: Obj) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
    )


def _integer(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{what} is {text!r}, not a whole number") from None


def labelled_options(annotations: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The priority and maximum runtime a labelled object's annotations ask (None: not
    given); ValueError, with a sentence, for one that is not a whole number."""

    def option(name: str) -> int | None:
        return _integer(annotations[name], name) if name in annotations else None

    return option(PRIORITY_ANNOTATION), option(MAX_RUNTIME_ANNOTATION)


def read_job(job: Obj) -> SourceShape | str:
    """The shape of a labelled Job, or why gpuqueue cannot queue it (a sentence for its
    status annotation and event). Every worker is one pod of the template: `parallelism` of
    them, each asking the GPUs its containers ask (one GPU resource, whole GPUs)."""
    meta = _meta(job)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    spec = job.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or []
    gpus: dict[str, int] = {}
    cpu = memory = 0
    for container in containers:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for resource, amount in asked.items():
            if is_gpu_resource(resource):
                gpus[resource] = gpus.get(resource, 0) + quantity(amount, resource)
        requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        cpu += quantity(requests.get(CPU, 0), CPU)
        memory += quantity(requests.get(MEMORY, 0), MEMORY)
    for container in pod.get("initContainers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        if any(is_gpu_resource(r) for r in limits):
            return "an init container asks for GPUs: only the main containers of a worker may"
    if not gpus or not any(gpus.values()):
        return "its pods ask for no GPU: the queue is for GPU work, run it without the queue label"
    if len(gpus) > 1:
        return f"its pods ask for GPUs of several resources ({', '.join(sorted(gpus))}): one only"
    resource, count = next(iter(gpus.items()))
    workers = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
    if workers < 1:
        return "its parallelism is 0: nothing to run"
    try:
        priority, runtime = labelled_options(annotations)
    except ValueError as exc:
        return str(exc)
    return SourceShape(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        team=str(labels.get(QUEUE_LABEL) or ""),
        workers=workers,
        gpus_per_worker=count,
        resource_name=resource,
        image=str((containers[0] if containers else {}).get("image") or ""),
        flavor=str(labels.get(FLAVOR_LABEL) or ""),
        priority=priority,
        max_runtime_seconds=runtime,
        user=str(annotations.get(USER_ANNOTATION) or ""),
        cpu_millicores=cpu or None,
        memory_mib=-(-memory // 2**20) if memory else None,
    )


def admission_patch(
    job: Obj, spec: LaunchSpec, options: ClusterOptions, hostnames: Mapping[str, str]
) -> dict[str, Any]:
    """The merge patch that admits the suspended Job `job` as attempt `spec`: gpuqueue's labels
    (which the admission policy lets only gpuqueue's pods carry) and proof on the Job, its
    labels, the plan and the placement gate on the pod template, the GPU nodes' tolerations,
    and `suspend: false`. The user's own gates, tolerations, labels and annotations stay.
    The resourceVersion makes it a compare-and-swap: a Job changed since it was read is read
    again, not overwritten."""
    meta = _meta(job)
    template = (job.get("spec") or {}).get("template") or {}
    pod = template.get("spec") or {}
    labels = owner_labels(spec)
    gates: Sequence[Obj] = pod.get("schedulingGates") or []
    tolerations = list(pod.get("tolerations") or [])
    for toleration in worker_tolerations(spec, options):
        if toleration not in tolerations:
            tolerations.append(toleration)
    slots = planned_slots(spec, hostnames)
    return {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": labels,
            "annotations": {PROOF_ANNOTATION: spec.proof} if spec.proof else {},
        },
        "spec": {
            "suspend": False,
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        **NO_DISRUPTION_ANNOTATIONS,
                        PLACEMENT_ANNOTATION: json.dumps(slots, separators=(",", ":")),
                    },
                },
                "spec": {
                    "schedulingGates": [
                        *[g for g in gates if g.get("name") != PLACEMENT_GATE],
                        {"name": PLACEMENT_GATE},
                    ],
                    "tolerations": tolerations,
                },
            },
        },
    }


def status_patch(job_id: int, text: str) -> dict[str, Any]:
    """The annotations that tell, on the object itself, which job it is and where it stands."""
    return {"metadata": {"annotations": {JOB_ANNOTATION: str(job_id), STATUS_ANNOTATION: text}}}


def refusal_patch(text: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {STATUS_ANNOTATION: text}}}


def status_of(job: Obj) -> str:
    return str((_meta(job).get("annotations") or {}).get(STATUS_ANNOTATION) or "")
