"""Pure: which gated pods of gpuqueue's gangs to release, and to which node.

A Job's pods are created behind the scheduling gate `gpuqueue.dev/placement` and carry the plan
in the annotation of the same name (`[[hostname, workers], ...]`). The worker of completion index
i belongs to the i-th slot of the plan expanded in order, so the same pod always gets the same
node, after a restart too. A gang is released whole: each pod gets a node selector for its one
hostname and loses the gate in one patch (Kubernetes allows adding node selectors to a gated pod),
and kube-scheduler binds it there, still checking that it fits. Kueue's topology-aware scheduling
ungates the same way.

A gang is released only when every pod of it exists and every planned node still takes it: not
cordoned, no NoSchedule or NoExecute taint its pods do not tolerate, and room for its GPUs (a DRA
flavor's devices too), CPU, memory and pods (what kube-scheduler would check once the gate is
off); otherwise it is held,
with a sentence saying why, for the sync to requeue it. Input is the API's JSON; no I/O here.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuqueue.cluster.inventory import (
    FINISHED_POD_PHASES,
    gpu_capacity,
    hostname_of,
    pod_gpus,
)
from gpuqueue.cluster.manifests import (
    COMPLETION_INDEX_ANNOTATION,
    DEVICES_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PLACEMENT_GATE,
    POD_SET_ANNOTATION,
)
from gpuqueue.core.gpu_resources import is_dra_resource, is_gpu_resource

Obj = Mapping[str, Any]
HOSTNAME = "kubernetes.io/hostname"


def pod_set_of(pod: Obj) -> str:
    """The pod set of a pod of a gang of several (gpuqueue.cluster.frameworks): a pod without a
    completion index takes the slot of its position among the gated pods of its pod set, in
    its pod set's own part of the plan; "" for a Job's pods."""
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(POD_SET_ANNOTATION, ""))


@dataclass(frozen=True, slots=True)
class Release:
    """Take the gate off one pod and pin it to `hostname`."""

    namespace: str
    name: str
    hostname: str
    gates: tuple[str, ...]  # the pod's other scheduling gates, kept
    node_selector: Mapping[str, str]

    def patch(self) -> list[dict[str, Any]]:
        """A JSON patch: the gate goes and the node selector comes in the same update, so the
        pod is never schedulable without its node."""
        return [
            {
                "op": "replace",
                "path": "/spec/schedulingGates",
                "value": [{"name": gate} for gate in self.gates],
            },
            {
                "op": "add",
                "path": "/spec/nodeSelector",
                "value": {**self.node_selector, HOSTNAME: self.hostname},
            },
        ]


def is_gated(pod: Obj) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == PLACEMENT_GATE for gate in gates)


def planned_hostname(pod: Obj, position: int | None = None) -> str | None:
    """The hostname of this worker's slot in the plan, or None when the pod says nothing.
    A pod without a completion index (a user's NonIndexed Job) takes the slot of its
    `position` among its gang's gated pods, in name order."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        found = annotations.get(COMPLETION_INDEX_ANNOTATION)
        index = int(found if found is not None else position)  # type: ignore[arg-type]
        plan = json.loads(annotations[PLACEMENT_ANNOTATION])
    except (KeyError, TypeError, ValueError):
        return None
    for hostname, workers in plan:
        if index < int(workers):
            return str(hostname)
        index -= int(workers)
    return None


# What a release checks besides GPUs, in kube-scheduler's units: CPU in millicores, memory in
# bytes, and the node's pod count. A node whose allocatable does not list one is not checked.
CPU, MEMORY, PODS = "cpu", "memory", "pods"
_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def quantity(value: Any, resource: str) -> int:
    """A Kubernetes quantity as an integer: millicores for CPU, bytes for memory, a plain
    count otherwise; 0 for what cannot be read, and for a negative or endless amount (a pod
    would be refused it; a custom resource's template, which the API server does not check,
    must not give GPUs back or stop a pass)."""
    text = str(value).strip()
    scale = 1000 if resource == CPU else 1
    number, factor, divisor = text, 1, 1
    if text.endswith("m"):
        number, divisor = text[:-1], 1000
    else:
        for suffix, size in _SUFFIXES.items():
            if text.endswith(suffix):
                number, factor = text[: -len(suffix)], size
                break
    try:
        amount = float(number) * factor * scale / divisor
    except ValueError:
        return 0
    return int(amount) if math.isfinite(amount) and amount > 0 else 0


def pod_needs(pod: Obj) -> dict[str, int]:
    """What a pod takes from its node: its GPUs, CPU and memory requests (a limit stands for a
    missing request, as the API server defaults it; the larger of the containers' sum and the
    largest init container, as kube-scheduler counts) and one pod."""
    spec = pod.get("spec") or {}

    def requests(container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {r: quantity(asked[r], r) for r in (CPU, MEMORY) if r in asked}

    total: dict[str, int] = defaultdict(int)
    for container in spec.get("containers") or []:
        for resource, amount in requests(container).items():
            total[resource] += amount
    for container in spec.get("initContainers") or []:
        for resource, amount in requests(container).items():
            total[resource] = max(total[resource], amount)
    return {
        **pod_gpus(pod),
        **dra_devices(pod),
        **{r: a for r, a in total.items() if a > 0},
        PODS: 1,
    }


def dra_devices(pod: Obj) -> dict[str, int]:
    """The DRA devices a worker of gpuqueue's claims (DEVICES_ANNOTATION), under gpuqueue's
    own resource names; nothing for any other pod, or one whose annotation cannot be read."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        found = json.loads(annotations.get(DEVICES_ANNOTATION) or "{}")
        return {
            str(name): int(count)
            for name, count in found.items()
            if is_dra_resource(str(name)) and int(count) > 0
        }
    except (AttributeError, TypeError, ValueError):
        return {}


def _capacity(node: Obj) -> dict[str, int]:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    room = dict(gpu_capacity(node))
    for resource in (CPU, MEMORY, PODS):
        if resource in allocatable:
            room[resource] = quantity(allocatable[resource], resource)
    return room


def free_room(
    nodes: Iterable[Obj],
    pods: Iterable[Obj],
    terminating: dict[str, dict[str, int]] | None = None,
    released: Collection[tuple[str, str]] | None = None,
    devices: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, dict[str, int]]:
    """{hostname: {resource: free}} for GPUs, CPU, memory and pods: allocatable less every
    unfinished pod bound there (terminating ones included: they hold theirs until gone) or
    released toward it. `released`, when given: the (namespace, name) of the pods that count
    while released and not bound yet (gpuqueue's proven ones): anyone can make a pod that
    names a node and never binds, and it holds nothing. `terminating`, when given, is filled
    with what the terminating pods hold, by hostname: room that comes back by itself.
    `devices`, by node name: DRA flavors' devices that others' claims leave (dra.gate_room),
    which gpuqueue's workers' DRA devices then come off as their GPUs do."""
    free: dict[str, dict[str, int]] = {}
    by_name: dict[str, str] = {}
    for node in nodes:
        hostname = hostname_of(node)
        by_name[node["metadata"]["name"]] = hostname
        free[hostname] = {**_capacity(node), **(devices or {}).get(node["metadata"]["name"], {})}
    for pod in pods:
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if phase in FINISHED_POD_PHASES:
            continue
        if spec.get("nodeName"):
            hostname = by_name.get(spec["nodeName"])
        elif not is_gated(pod):  # released toward its planned node, not bound yet
            meta = pod.get("metadata") or {}
            if released is not None and (meta.get("namespace"), meta.get("name")) not in released:
                continue
            hostname = (spec.get("nodeSelector") or {}).get(HOSTNAME)
        else:
            continue  # gated: holds nothing until released
        if hostname is None or hostname not in free:
            continue
        stopping = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        for resource, amount in pod_needs(pod).items():
            if resource not in free[hostname] and not (
                is_gpu_resource(resource) or is_dra_resource(resource)
            ):
                continue  # not listed by the node: not checked
            free[hostname][resource] = free[hostname].get(resource, 0) - amount
            if stopping and terminating is not None:
                coming = terminating.setdefault(hostname, {})
                coming[resource] = coming.get(resource, 0) + amount
    return free


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' rule: a toleration matches a taint by effect (none: every effect), key
    (none with Exists: every key) and, with Equal (the default), value."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        if toleration.get("operator") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (toleration.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def _refusal(node: Obj | None, hostname: str, pod: Obj) -> str:
    """Why `node` will not take `pod` whatever the room: cordoned, or a NoSchedule or
    NoExecute taint the pod does not tolerate; "" when it takes it."""
    if node is None:
        return ""  # a node gone: the room check says so
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return f"planned node {hostname} is cordoned"
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            value = f"={taint['value']}" if taint.get("value") else ""
            return (
                f"planned node {hostname} has the taint {taint.get('key')}{value}:"
                f"{taint.get('effect')}, which worker {pod['metadata']['name']} does not tolerate"
            )
    return ""


def _gpus_first(item: tuple[tuple[str, str], int]) -> tuple[str, bool, str]:
    (hostname, resource), _ = item
    return hostname, not (is_gpu_resource(resource) or is_dra_resource(resource)), resource


def _amount(resource: str, amount: int) -> str:
    if resource == CPU:
        return f"{amount}m cpu"
    if resource == MEMORY:
        return f"{amount // 2**20} MiB memory"
    if resource == PODS:
        return f"{amount} pod{'s' if amount != 1 else ''}"
    return f"{amount} {resource}"


def releases(
    jobs: Mapping[tuple[int, int], Obj],
    gangs: Mapping[tuple[int, int], Sequence[Obj]],
    pods: Iterable[Obj],
    nodes: Iterable[Obj],
    devices: tuple[Mapping[str, Mapping[str, int]], Mapping[str, Mapping[str, int]]] = ({}, {}),
) -> tuple[list[Release], dict[tuple[int, int], str]]:
    """(pods to release, {attempt: why its gang is held}). `jobs` and `gangs`: the Jobs and
    pods gpuqueue proved it made, by attempt (gpuqueue.cluster.proof.sort_out); `pods`: every
    pod, whoever made it, for the room; `devices`: DRA flavors' devices by node name, those
    others' claims leave and those of them coming back (dra.gate_room).

    1. Room on every node, as `free_room` counts it: every pod bound there holds what it
       holds, a pod gpuqueue cannot prove it made too (it can never free room); a pod not
       bound yet holds room only when it is one of the proven gangs' released workers.
    2. Gated pods of proven gangs, by attempt; a gang whose Job is not yet fully created waits
       quietly. A pod nothing proves is never released, whatever its labels say.
    3. Gangs in job order: one whose every planned node takes its pods (not cordoned, every
       NoSchedule and NoExecute taint tolerated) and has room for them (GPUs, CPU, memory,
       pods) is released whole and takes that room. One that would have room once the
       terminating pods there are gone (a victim still saving its checkpoint) waits, quietly,
       as a gang being created does: its start has not failed. Any other is held, saying
       which node refuses it or lacks how much of what.
    """
    nodes = list(nodes)
    by_hostname = {hostname_of(node): node for node in nodes}
    terminating: dict[str, dict[str, int]] = {}
    proven = {
        (pod["metadata"].get("namespace"), pod["metadata"].get("name"))
        for gang in gangs.values()
        for pod in gang
    }
    room = free_room(nodes, pods, terminating, proven, devices[0])  # 1.
    for node in nodes:
        for resource, count in devices[1].get(node["metadata"]["name"], {}).items():
            coming = terminating.setdefault(hostname_of(node), {})
            coming[resource] = coming.get(resource, 0) + count
    gated: dict[tuple[int, int], list[Obj]] = defaultdict(list)  # 2.
    existing: dict[tuple[int, int], int] = defaultdict(int)
    for key, gang in gangs.items():
        for pod in gang:
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            existing[key] += 1
            if is_gated(pod):
                gated[key].append(pod)
    workers = {
        key: int((job.get("spec") or {}).get("parallelism") or 0) for key, job in jobs.items()
    }
    out: list[Release] = []
    held: dict[tuple[int, int], str] = {}
    for key in sorted(gated):  # 3.
        if existing[key] < workers.get(key, 0):
            continue  # the Job controller is still creating the gang's pods
        need: dict[tuple[str, str], int] = defaultdict(int)
        targets = []
        positions: dict[str, int] = defaultdict(int)
        for pod in sorted(gated[key], key=lambda p: p["metadata"]["name"]):
            position = positions[pod_set_of(pod)]
            positions[pod_set_of(pod)] += 1
            hostname = planned_hostname(pod, position)
            if hostname is None:
                held[key] = f"pod {pod['metadata']['name']} carries no planned node"
                break
            if refusal := _refusal(by_hostname.get(hostname), hostname, pod):
                held[key] = refusal
                break
            targets.append((pod, hostname))
            for resource, count in pod_needs(pod).items():
                if (
                    is_gpu_resource(resource)
                    or is_dra_resource(resource)
                    or resource in room.get(hostname, {})
                ):
                    need[(hostname, resource)] += count
        if key in held:
            continue
        short = [
            (hostname, resource, count, room.get(hostname, {}).get(resource, 0))
            for (hostname, resource), count in sorted(need.items(), key=_gpus_first)
            if room.get(hostname, {}).get(resource, 0) < count
        ]
        if short and all(
            free + terminating.get(hostname, {}).get(resource, 0) >= count
            for hostname, resource, count, free in short
        ):
            continue  # room comes back as the terminating pods go: a wait
        if short:
            hostname, resource, count, free = short[0]
            if hostname not in room:
                held[key] = f"planned node {hostname} is gone"
            elif is_gpu_resource(resource) or is_dra_resource(resource):
                held[key] = (
                    f"planned node {hostname} has {max(free, 0)} {resource} free"
                    f" for {count} (taken by pods that started since the plan)"
                )
            elif resource == PODS:
                held[key] = (
                    f"planned node {hostname} takes {max(free, 0)} more pods, not {count}"
                    " (its pod limit, reached by pods that started since the plan)"
                )
            else:
                held[key] = (
                    f"planned node {hostname} has {_amount(resource, max(free, 0))} free"
                    f" for {_amount(resource, count)} (taken by pods that started since the plan)"
                )
            continue
        for (hostname, resource), count in need.items():
            room[hostname][resource] -= count
        for pod, hostname in targets:
            spec = pod.get("spec") or {}
            out.append(
                Release(
                    namespace=pod["metadata"].get("namespace", ""),
                    name=pod["metadata"]["name"],
                    hostname=hostname,
                    gates=tuple(
                        g["name"]
                        for g in spec.get("schedulingGates") or []
                        if g.get("name") != PLACEMENT_GATE
                    ),
                    node_selector=dict(spec.get("nodeSelector") or {}),
                )
            )
    return out, held
