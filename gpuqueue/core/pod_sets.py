"""Pure: a gang of pod sets that ask different GPUs per pod, as gpuqueue stores and plans it.

A user's PyTorchJob or RayJob may ask 1 GPU for its head and 8 for each worker. Its job row
keeps its GPU pod sets (`Job.pod_sets`): [{"name", "pods", "gpus", "cpu_millicores",
"memory_mib"}] in the object's pod order, pods a count and the rest per pod. Its `workers` and
`gpus_per_worker` count its GPUs in units of the greatest common divisor of the sets' GPUs per
pod (`units`): every product of the two is still its GPUs (quotas, usage, the GPU grid), and
its placement is units per node (`unit_placement`). The engine plans its pods (`asks`,
scheduler/model.py's PendingJob.pods) and, once admitted, sees its units with what its pods
take on each node (`rooms`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuqueue.scheduler.model import PodAsk, node_asks

PodSetRow = Mapping[str, Any]
MIB = 1 << 20


def units(sets: Sequence[PodSetRow]) -> tuple[int, int]:
    """(workers, gpus_per_worker): the gang's GPUs in units of the sets' common divisor."""
    unit = math.gcd(*(int(s["gpus"]) for s in sets))
    return sum(int(s["pods"]) * int(s["gpus"]) for s in sets) // unit, unit


def asks(sets: Sequence[PodSetRow]) -> tuple[PodAsk, ...]:
    """Each pod's (GPUs, CPU millicores, memory bytes), in pod order."""
    return tuple(
        (int(s["gpus"]), int(s.get("cpu_millicores") or 0), int(s.get("memory_mib") or 0) * MIB)
        for s in sets
        for _ in range(int(s["pods"]))
    )


def unit_placement(pod_nodes: Sequence[str], pods: Sequence[PodAsk]) -> dict[str, int]:
    """Units per node (`units`), given each pod's node and ask in pod order."""
    unit = math.gcd(*(gpus for gpus, _, _ in pods))
    return {node: gpus // unit for node, gpus, _ in sorted(node_asks(pod_nodes, pods))}


def rooms(
    pod_nodes: Sequence[str], sets: Sequence[PodSetRow]
) -> tuple[tuple[str, int, int, int], ...]:
    """(node, CPU millicores, memory bytes, pods) its pods take on each node."""
    return tuple((node, *room) for node, _, room in sorted(node_asks(pod_nodes, asks(sets))))


def describe(sets: Sequence[PodSetRow]) -> str:
    """What each pod set asks, for people: head 1 × 1 GPU, worker 2 × 8 GPUs."""
    return ", ".join(
        f"{s['name']} {s['pods']} × {s['gpus']} GPU{'' if int(s['gpus']) == 1 else 's'}"
        for s in sets
    )


def pods_per_node(
    pod_nodes: Sequence[str], sets: Sequence[PodSetRow]
) -> list[tuple[str, int, int]]:
    """(node, pods, GPUs) on each node, by node name: what a placement table shows."""
    return [(node, room[2], gpus) for node, gpus, room in sorted(node_asks(pod_nodes, asks(sets)))]
