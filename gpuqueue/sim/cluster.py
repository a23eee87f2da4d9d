"""The simulated cluster: nodes, each offering GPUs of one flavor."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuqueue.scheduler.model import Node


@dataclass(frozen=True, slots=True)
class SimNode:
    name: str
    flavor: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Cluster:
    """A fixed set of nodes; one flavor per node is all the traces describe."""

    nodes: tuple[SimNode, ...]

    @property
    def flavors(self) -> tuple[str, ...]:
        return tuple(sorted({n.flavor for n in self.nodes}))

    def capacity(self, flavor: str | None = None) -> int:
        return sum(n.gpus for n in self.nodes if flavor is None or n.flavor == flavor)

    def node_size(self, flavor: str) -> int:
        """The largest node of a flavor: the biggest worker a gang of that flavor can have."""
        return max((n.gpus for n in self.nodes if n.flavor == flavor), default=0)

    def engine_nodes(self) -> tuple[Node, ...]:
        return tuple(Node(name=n.name, capacity={n.flavor: n.gpus}) for n in self.nodes)


def uniform_cluster(nodes: int, gpus_per_node: int, flavor: str = "gpu") -> Cluster:
    width = len(str(max(nodes - 1, 0)))
    return Cluster(
        tuple(SimNode(f"{flavor}-{i:0{width}d}", flavor, gpus_per_node) for i in range(nodes))
    )


def combine(clusters: Iterable[Cluster]) -> Cluster:
    return Cluster(tuple(n for c in clusters for n in c.nodes))


_SPEC = re.compile(r"^\s*(?:(?P<flavor>[\w.\-/]+)\s*=\s*)?(?P<nodes>\d+)\s*x\s*(?P<gpus>\d+)\s*$")


def parse_cluster_spec(spec: str) -> Cluster:
    """Parse "64x8" or "h100=32x8,l4=16x4" (N nodes × G GPUs per flavor; default flavor "gpu")."""
    parts = []
    for chunk in spec.split(","):
        m = _SPEC.match(chunk)
        if m is None:
            raise ValueError(
                f"cluster spec {chunk!r}: expected [FLAVOR=]NODESxGPUS, e.g. h100=32x8"
            )
        parts.append(uniform_cluster(int(m["nodes"]), int(m["gpus"]), m["flavor"] or "gpu"))
    return combine(parts)


def offered_load(gpu_seconds: float, span_seconds: float, gpus: int) -> float:
    """Work asked for, as a fraction of what the cluster can do over the submission span."""
    return gpu_seconds / (span_seconds * gpus) if span_seconds > 0 and gpus > 0 else 0.0


def nodes_for_load(gpu_seconds: float, span_seconds: float, gpus_per_node: int, load: float) -> int:
    """How many nodes make `gpu_seconds` of work over `span_seconds` an offered load of `load`."""
    return max(1, round(gpu_seconds / (span_seconds * gpus_per_node * load)))
