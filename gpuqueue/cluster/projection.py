"""Pure: the parts of nodes, pods and Jobs that gpuqueue reads, and nothing else.

The watcher keeps every node and every pod of the cluster for as long as it runs. Whole objects
are mostly what gpuqueue never reads: a pod's environment, volumes, probes and images, a node's
image list and annotations. Each kind has a shape, a nested allow-list of the paths that
`inventory`, `status`, `gates` and the backend read; anything else is dropped as the object
arrives, listed or watched. A shape is a dict whose values are `ALL` (keep the value as it is)
or another shape, which applies to a mapping or to each mapping of a list (containers,
conditions, taints).

Reading a new field means adding it here: tests/cluster/test_projection.py runs the readers over
whole and projected objects and expects the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from gpuqueue.cluster.manifests import (
    CHECKPOINT_ANNOTATION,
    COMPLETION_INDEX_ANNOTATION,
    DEVICES_ANNOTATION,
    LABEL_ATTEMPT,
    LABEL_INSTANCE,
    LABEL_JOB_ID,
    MANAGED_BY,
    PLACEMENT_ANNOTATION,
    POD_SET_ANNOTATION,
    PROOF_ANNOTATION,
)

Obj = dict[str, Any]
ALL: Final = True  # keep this value whole
Shape = Mapping[str, Any]  # str -> ALL | Shape

# The labels by which attempt_of() recognises gpuqueue's pods and Jobs.
GPUQUEUE_LABELS: Shape = {
    MANAGED_BY: ALL,
    LABEL_JOB_ID: ALL,
    LABEL_ATTEMPT: ALL,
    LABEL_INSTANCE: ALL,
}
# Who owns an object: how gpuqueue.cluster.proof tells its own pods and Jobs from lookalikes.
OWNER_REFERENCES: Shape = {"kind": ALL, "name": ALL, "uid": ALL, "controller": ALL}
CONDITION: Shape = {"type": ALL, "status": ALL, "reason": ALL, "message": ALL}

NODE: Shape = {
    "metadata": {"name": ALL, "labels": ALL, "creationTimestamp": ALL},
    "spec": {"taints": {"key": ALL, "value": ALL, "effect": ALL}, "unschedulable": ALL},
    "status": {
        "allocatable": ALL,
        "conditions": {"type": ALL, "status": ALL, "lastTransitionTime": ALL},
    },
}

POD: Shape = {
    "metadata": {
        "name": ALL,
        "namespace": ALL,
        "labels": GPUQUEUE_LABELS,
        "ownerReferences": OWNER_REFERENCES,
        "annotations": {
            COMPLETION_INDEX_ANNOTATION: ALL,
            PLACEMENT_ANNOTATION: ALL,
            DEVICES_ANNOTATION: ALL,
            POD_SET_ANNOTATION: ALL,
            CHECKPOINT_ANNOTATION: ALL,
        },
        "creationTimestamp": ALL,
        "deletionTimestamp": ALL,
    },
    "spec": {
        "nodeName": ALL,
        # A release writes the pod's node selector back with the hostname added: keep it whole.
        "nodeSelector": ALL,
        "schedulingGates": {"name": ALL},
        # A release checks the taints they tolerate and the CPU and memory they request.
        "tolerations": {"key": ALL, "operator": ALL, "value": ALL, "effect": ALL},
        "containers": {"resources": {"limits": ALL, "requests": ALL}},
        "initContainers": {"resources": {"limits": ALL, "requests": ALL}},
        # The inventory counts what others' pods request, their runtime's overhead included.
        "overhead": ALL,
    },
    "status": {
        "phase": ALL,
        "reason": ALL,
        "message": ALL,
        "nominatedNodeName": ALL,
        "startTime": ALL,
        # Since when a released pod is unschedulable (the grace before a failed start).
        "conditions": {**CONDITION, "lastTransitionTime": ALL},
        "containerStatuses": {
            "name": ALL,
            "state": {
                "waiting": {"reason": ALL, "message": ALL},
                "terminated": {"exitCode": ALL, "reason": ALL},
            },
        },
    },
}

JOB: Shape = {
    "metadata": {
        "name": ALL,
        "namespace": ALL,
        "uid": ALL,
        "labels": GPUQUEUE_LABELS,
        "annotations": {PROOF_ANNOTATION: ALL},
        "ownerReferences": OWNER_REFERENCES,
        "creationTimestamp": ALL,
        "deletionTimestamp": ALL,
    },
    # A user's Job that a job mirrors is its workload only while not suspended.
    "spec": {"parallelism": ALL, "suspend": ALL},
    "status": {
        "completionTime": ALL,
        "conditions": {**CONDITION, "lastTransitionTime": ALL},
    },
}

SHAPES: Mapping[str, Shape] = {"nodes": NODE, "pods": POD, "jobs": JOB}


def project(value: Any, shape: Shape) -> Any:
    """`value` cut down to `shape`. The keys come from the shape, so every kept object shares
    the same key strings rather than holding its own copies from the JSON."""
    if isinstance(value, list):
        return [project(item, shape) for item in value]
    if not isinstance(value, dict):
        return value  # null or a scalar where a mapping was expected: kept as the API sent it
    out: Obj = {}
    for key, inner in shape.items():
        if key in value:
            out[key] = value[key] if inner is ALL else project(value[key], inner)
    return out


def projector(kind: str) -> Callable[[Obj], Obj]:
    """The projection of one kind ("nodes", "pods", "jobs"), for a list or a watch of it."""
    shape = SHAPES[kind]

    def cut(obj: Obj) -> Obj:
        projected: Obj = project(obj, shape)
        return projected

    return cut
