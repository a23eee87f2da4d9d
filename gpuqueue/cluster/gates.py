"""Pure: which gated pods of gpuqueue's gangs to release, and to which node.

A Job's pods are created behind the scheduling gate `gpuqueue.dev/placement` and carry the plan
in the annotation of the same name (`[[hostname, workers], ...]`). The worker of completion index
i belongs to the i-th slot of the plan expanded in order, so the same pod always gets the same
node, after a restart too. A gang is released whole: each pod gets a node selector for its one
hostname and loses the gate in one patch (Kubernetes allows adding node selectors to a gated pod),
and kube-scheduler binds it there, still checking that it fits. Kueue's topology-aware scheduling
ungates the same way.

A gang is released only when every pod of it exists and every planned node still has room for
it; otherwise it is held, with a sentence saying why, for the sync to requeue it. Input is the
API's JSON; no I/O here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuqueue.cluster.inventory import FINISHED_POD_PHASES, gpu_capacity, hostname_of, pod_gpus
from gpuqueue.cluster.manifests import (
    COMPLETION_INDEX_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PLACEMENT_GATE,
)

Obj = Mapping[str, Any]
HOSTNAME = "kubernetes.io/hostname"


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


def planned_hostname(pod: Obj) -> str | None:
    """The hostname of this worker's slot in the plan, or None when the pod says nothing."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        index = int(annotations[COMPLETION_INDEX_ANNOTATION])
        plan = json.loads(annotations[PLACEMENT_ANNOTATION])
    except (KeyError, TypeError, ValueError):
        return None
    for hostname, workers in plan:
        if index < int(workers):
            return str(hostname)
        index -= int(workers)
    return None


def free_gpus(
    nodes: Iterable[Obj], pods: Iterable[Obj], terminating: dict[str, dict[str, int]] | None = None
) -> dict[str, dict[str, int]]:
    """{hostname: {resource: GPUs free}}: allocatable less every unfinished pod bound there
    (terminating ones included: they hold their GPUs until gone) or released toward it.
    `terminating`, when given, is filled with the GPUs of terminating pods by hostname: room
    that comes back by itself."""
    free: dict[str, dict[str, int]] = {}
    by_name: dict[str, str] = {}
    for node in nodes:
        hostname = hostname_of(node)
        by_name[node["metadata"]["name"]] = hostname
        free[hostname] = dict(gpu_capacity(node))
    for pod in pods:
        spec = pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if phase in FINISHED_POD_PHASES:
            continue
        if spec.get("nodeName"):
            hostname = by_name.get(spec["nodeName"])
        elif not is_gated(pod):  # released toward its planned node, not bound yet
            hostname = (spec.get("nodeSelector") or {}).get(HOSTNAME)
        else:
            continue  # gated: holds nothing until released
        if hostname is None or hostname not in free:
            continue
        stopping = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        for resource, count in pod_gpus(pod).items():
            free[hostname][resource] = free[hostname].get(resource, 0) - count
            if stopping and terminating is not None:
                coming = terminating.setdefault(hostname, {})
                coming[resource] = coming.get(resource, 0) + count
    return free


def releases(
    jobs: Mapping[tuple[int, int], Obj],
    gangs: Mapping[tuple[int, int], Sequence[Obj]],
    pods: Iterable[Obj],
    nodes: Iterable[Obj],
) -> tuple[list[Release], dict[tuple[int, int], str]]:
    """(pods to release, {attempt: why its gang is held}). `jobs` and `gangs`: the Jobs and
    pods gpuqueue proved it made, by attempt (gpuqueue.cluster.proof.sort_out); `pods`: every
    pod, whoever made it, for the room.

    1. Room on every node, as `free_gpus` counts it: every pod holds what it holds there, a
       pod gpuqueue cannot prove it made too (it can never free room).
    2. Gated pods of proven gangs, by attempt; a gang whose Job is not yet fully created waits
       quietly. A pod nothing proves is never released, whatever its labels say.
    3. Gangs in job order: one whose every planned node has room is released whole and takes
       that room. One that would have room once the terminating pods there are gone (a
       victim still saving its checkpoint) waits, quietly, as a gang being created does: its
       start has not failed. Any other is held, saying which node lacks how many GPUs.
    """
    terminating: dict[str, dict[str, int]] = {}
    room = free_gpus(nodes, pods, terminating)  # 1.
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
        for pod in gated[key]:
            hostname = planned_hostname(pod)
            if hostname is None:
                held[key] = f"pod {pod['metadata']['name']} carries no planned node"
                break
            targets.append((pod, hostname))
            for resource, count in pod_gpus(pod).items():
                need[(hostname, resource)] += count
        if key in held:
            continue
        short = [
            (hostname, resource, count, room.get(hostname, {}).get(resource, 0))
            for (hostname, resource), count in sorted(need.items())
            if room.get(hostname, {}).get(resource, 0) < count
        ]
        if short and all(
            free + terminating.get(hostname, {}).get(resource, 0) >= count
            for hostname, resource, count, free in short
        ):
            continue  # room comes back as the terminating pods go: a wait
        if short:
            hostname, resource, count, free = short[0]
            held[key] = (
                f"planned node {hostname} has {max(free, 0)} {resource} free"
                f" for {count} (taken by pods that started since the plan)"
                if hostname in room
                else f"planned node {hostname} is gone"
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
