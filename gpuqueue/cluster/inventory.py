"""Pure parsing of Kubernetes Nodes (and the pods on them) into the backend's NodeInfo.

Input is the API's JSON (dicts, as listed or watched); no I/O here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from gpuqueue.cluster.base import NodeInfo, gpu_model_of
from gpuqueue.cluster.dra import DraUse
from gpuqueue.cluster.status import parse_time
from gpuqueue.core.gpu_resources import is_gpu_resource

FINISHED_POD_PHASES = frozenset({"Succeeded", "Failed"})
# Taints that say a node is being emptied: `kubectl cordon` (with spec.unschedulable), the
# cluster-autoscaler scaling it down, Karpenter disrupting it (v1 and the older key).
DRAIN_TAINTS = frozenset(
    {
        "node.kubernetes.io/unschedulable",
        "ToBeDeletedByClusterAutoscaler",
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption",
    }
)


def _count(quantity: Any) -> int:
    """GPU quantities are whole numbers ("8"); anything else counts as none."""
    try:
        return int(str(quantity))
    except ValueError:
        return 0


# A pod's CPU (millicores), memory (bytes) and one pod slot.
Requests = tuple[int, int, int]


# More than any node has (a pebibyte, a million million millicores), and room for many such
# sums within the database's 64-bit columns: a larger amount reads as this, so a node asked
# for it reads as full.
MAX_AMOUNT = 1 << 50


def amount(quantity: Any, scale: int) -> int:
    """A Kubernetes quantity ("250m", "2Ti") in whole units of 1/scale ("250m" at scale
    1000: 250 millicores), rounded up, within 0..MAX_AMOUNT; malformed ("abc", "NaN"): none."""
    try:
        value = parse_quantity(quantity) * scale
        whole = int(min(value, MAX_AMOUNT))
    except (ValueError, TypeError, ArithmeticError):
        return 0
    whole = whole + 1 if value > whole else whole
    return max(0, min(whole, MAX_AMOUNT))


def allocatable(node: Mapping[str, Any]) -> tuple[int | None, int | None, int | None]:
    """The node's allocatable CPU (millicores), memory (bytes) and pods; None where the node
    does not say."""
    found = (node.get("status") or {}).get("allocatable") or {}
    cpu, memory, pods = found.get("cpu"), found.get("memory"), found.get("pods")
    return (
        None if cpu is None else amount(cpu, 1000),
        None if memory is None else amount(memory, 1),
        None if pods is None else amount(pods, 1),
    )


def pod_requests(pod: Mapping[str, Any]) -> Requests:
    """What a pod requests of its node as kube-scheduler counts it: the larger of its
    containers' sum and its largest init container (a limit stands for a missing request, as
    the API server defaults it), plus the pod's overhead; and a slot."""
    spec = pod.get("spec") or {}

    def of(resources: Mapping[str, Any] | None) -> tuple[int, int]:
        found = resources or {}
        return amount(found.get("cpu", 0), 1000), amount(found.get("memory", 0), 1)

    def asked(container: Mapping[str, Any]) -> tuple[int, int]:
        resources = container.get("resources") or {}
        return of({**(resources.get("limits") or {}), **(resources.get("requests") or {})})

    cpu = memory = 0
    for container in spec.get("containers") or []:
        c, m = asked(container)
        cpu, memory = cpu + c, memory + m
    for container in spec.get("initContainers") or []:
        c, m = asked(container)
        cpu, memory = max(cpu, c), max(memory, m)
    c, m = of(spec.get("overhead"))
    return cpu + c, memory + m, 1


def gpu_capacity(node: Mapping[str, Any]) -> dict[str, int]:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {
        name: count
        for name, quantity in sorted(allocatable.items())
        if is_gpu_resource(name) and (count := _count(quantity)) > 0
    }


def device_capacity(node: Mapping[str, Any]) -> dict[str, int]:
    """Allocatable devices that are not GPUs (`rdma/ib`, `nvidia.com/hostdev`): extended
    resources, named with a domain, that a flavor's fabric may ask for."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {
        name: count
        for name, quantity in sorted(allocatable.items())
        if "/" in name
        and not is_gpu_resource(name)
        and not name.startswith(("hugepages-", "kubernetes.io/"))
        and (count := amount(quantity, 1)) > 0  # "1k" shared devices are a thousand
    }


def is_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False  # a node that never reported Ready is not ready


def is_draining(node: Mapping[str, Any]) -> bool:
    """Cordoned, or tainted by an autoscaler that is about to remove it: no new work goes
    there, and the gangs on it are preempted with a checkpoint (cycle/cluster_sync.py)."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return True
    return any(taint.get("key") in DRAIN_TAINTS for taint in spec.get("taints") or [])


def not_ready_since(node: Mapping[str, Any]) -> datetime | None:
    """When the node's Ready condition last left True (None while Ready). A node that never
    reported counts from its creation."""
    if is_ready(node):
        return None
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return parse_time(condition.get("lastTransitionTime"))
    return parse_time((node.get("metadata") or {}).get("creationTimestamp"))


def pod_gpus(pod: Mapping[str, Any]) -> dict[str, int]:
    """GPUs a pod holds: the larger of its containers' sum and its largest init container, as
    kube-scheduler counts them (GPUs must be limits; a request without a limit is refused)."""
    spec = pod.get("spec") or {}

    def limits(container: Mapping[str, Any]) -> dict[str, int]:
        found = ((container.get("resources") or {}).get("limits")) or {}
        return {k: _count(v) for k, v in found.items() if is_gpu_resource(k)}

    total: dict[str, int] = defaultdict(int)
    for container in spec.get("containers") or []:
        for name, count in limits(container).items():
            total[name] += count
    for container in spec.get("initContainers") or []:
        for name, count in limits(container).items():
            total[name] = max(total[name], count)
    return {name: count for name, count in total.items() if count > 0}


@dataclass(frozen=True, slots=True)
class GpuUse:
    """GPUs on each node that no live gpuqueue job accounts for, sorted out by holder."""

    # {node: {resource: GPUs}} held by others: every pod gpuqueue cannot prove it made.
    external: Mapping[str, Mapping[str, int]]
    # {node: {job id: {resource: GPUs}}} held by gpuqueue's proven pods that are terminating
    # or whose attempt is no longer live: they come back, to the job they were taken for.
    draining: Mapping[str, Mapping[int, Mapping[str, int]]]
    # {node: (CPU, memory, pods)} requested by every unfinished pod there that is not a live
    # job's running worker (those are the jobs' own requests), GPUs or not: system pods,
    # others' pods, and gpuqueue's terminating ones, which hold their room until gone.
    requests: Mapping[str, Requests] = field(default_factory=dict)


def gpu_use(
    pods: Iterable[Mapping[str, Any]],
    live: Collection[tuple[int, int]] | None = None,
    ours: Mapping[tuple[str, str], tuple[int, int]] | None = None,
) -> GpuUse:
    """What unfinished pods bound (or nominated by preemption) to a node hold, besides the
    workers of live jobs (the database's placement counts those).

    A pod gpuqueue cannot prove it made is another's, whatever its labels say: a tenant must
    not make capacity look like it is coming back. `ours`: the attempt of each pod gpuqueue
    proved it made, by (namespace, name) (gpuqueue.cluster.proof.Ours.pod_keys). With `live`
    None, gpuqueue's pods count only while terminating.
    """
    external: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    draining: dict[str, dict[int, dict[str, int]]] = defaultdict(dict)
    requests: dict[str, Requests] = {}
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName") or status.get("nominatedNodeName")
        if not node or status.get("phase") in FINISHED_POD_PHASES:
            continue
        meta = pod.get("metadata") or {}
        key = (ours or {}).get((meta.get("namespace") or "", meta.get("name") or ""))
        terminating = bool(meta.get("deletionTimestamp"))
        if key is not None and not terminating and (live is None or key in live):
            continue  # a live job's worker: the database's placement counts it
        asked = pod_requests(pod)
        before = requests.get(node, (0, 0, 0))
        requests[node] = tuple(  # type: ignore[assignment]
            min(was + more, MAX_AMOUNT) for was, more in zip(before, asked, strict=True)
        )
        gpus = pod_gpus(pod)
        if not gpus:
            continue
        # A live job's terminating worker (its replacement may already hold GPUs beside it)
        # is held, not coming back: only a stopped attempt's GPUs return to the queue.
        if key is None or (live is not None and key in live):
            held = external[node]
        else:
            held = draining[node].setdefault(key[0], {})
        for name, count in gpus.items():
            held[name] = held.get(name, 0) + count
    return GpuUse(
        external={node: dict(by_name) for node, by_name in external.items()},
        draining=dict(draining),
        requests=requests,
    )


def node_info(
    node: Mapping[str, Any],
    used_externally: Mapping[str, int],
    draining: Mapping[int, Mapping[str, int]] | None = None,
    requests: Requests = (0, 0, 0),
) -> NodeInfo:
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    cpu, memory, pods = allocatable(node)
    labels = dict(metadata.get("labels") or {})
    return NodeInfo(
        name=metadata["name"],
        capacity=gpu_capacity(node),
        devices=device_capacity(node),
        labels=labels,
        gpu_model=gpu_model_of(labels),
        taints=[
            {k: str(v) for k, v in taint.items() if k in ("key", "value", "effect")}
            for taint in spec.get("taints") or []
        ],
        ready=is_ready(node),
        cordoned=is_draining(node),
        used_externally=dict(used_externally),
        draining={job: dict(gpus) for job, gpus in sorted((draining or {}).items())},
        allocatable_cpu_millicores=cpu,
        allocatable_memory_bytes=memory,
        allocatable_pods=pods,
        external_cpu_millicores=requests[0],
        external_memory_bytes=requests[1],
        external_pods=requests[2],
    )


def inventory(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    live: Collection[tuple[int, int]] | None = None,
    ours: Mapping[tuple[str, str], tuple[int, int]] | None = None,
) -> list[NodeInfo]:
    """Every node, GPU or not (a node without GPUs simply offers none), by name."""
    use = gpu_use(pods, live, ours)
    infos = []
    for node in nodes:
        name = node["metadata"]["name"]
        infos.append(
            node_info(
                node,
                use.external.get(name, {}),
                use.draining.get(name),
                use.requests.get(name, (0, 0, 0)),
            )
        )
    return sorted(infos, key=lambda info: info.name)


def with_dra(info: NodeInfo, use: DraUse) -> NodeInfo:
    """The node with its DRA flavors' devices (gpuqueue.cluster.dra): offered, held by
    others, and held by gpuqueue's own stopping attempts, beside its extended resources."""
    name = info.name
    if not (name in use.capacity or name in use.external or name in use.draining):
        return info
    draining = {job: dict(held) for job, held in info.draining.items()}
    for job, held in (use.draining.get(name) or {}).items():
        draining.setdefault(job, {}).update(held)
    return replace(
        info,
        capacity={**info.capacity, **(use.capacity.get(name) or {})},
        used_externally={**info.used_externally, **(use.external.get(name) or {})},
        draining=dict(sorted(draining.items())),
    )


def hostname_of(node: Mapping[str, Any]) -> str:
    """The `kubernetes.io/hostname` label that node affinity matches; usually the node name,
    but not on every cloud."""
    metadata = node.get("metadata") or {}
    return str((metadata.get("labels") or {}).get("kubernetes.io/hostname", metadata["name"]))
