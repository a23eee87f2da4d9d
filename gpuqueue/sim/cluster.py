"""The simulated cluster: nodes, each offering GPUs of one flavor, maybe in racks and blocks."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuqueue.scheduler.model import Node

# The node labels of a cluster spec's topology levels (`parse_cluster_spec`), outermost first.
BLOCK_LABEL = "topology.gpuqueue.dev/block"
RACK_LABEL = "topology.gpuqueue.dev/rack"
LEVELS = {"block": BLOCK_LABEL, "rack": RACK_LABEL}  # a replay's --gang-level


@dataclass(frozen=True, slots=True)
class SimNode:
    name: str
    flavor: str
    gpus: int
    labels: tuple[tuple[str, str], ...] = ()  # topology labels (key, value)


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
        return tuple(
            Node(name=n.name, capacity={n.flavor: n.gpus}, labels=dict(n.labels))
            for n in self.nodes
        )

    def topologies(self) -> dict[str, tuple[str, ...]]:
        """Flavor -> its topology levels (Snapshot.topologies): those its nodes carry."""
        found: dict[str, tuple[str, ...]] = {}
        for n in self.nodes:
            if n.labels and n.flavor not in found:
                keys = {key for key, _ in n.labels}
                found[n.flavor] = tuple(k for k in (BLOCK_LABEL, RACK_LABEL) if k in keys)
        return found


def uniform_cluster(
    nodes: int, gpus_per_node: int, flavor: str = "gpu", rack: int = 0, block: int = 0
) -> Cluster:
    """`nodes` of `gpus_per_node`; with `rack`, in racks of that many nodes (labelled
    RACK_LABEL), and with `block`, racks in blocks of that many racks (BLOCK_LABEL)."""
    width = len(str(max(nodes - 1, 0)))
    made = []
    for i in range(nodes):
        labels: tuple[tuple[str, str], ...] = ()
        if rack:
            r = i // rack
            labels = ((RACK_LABEL, f"{flavor}-r{r}"),)
            if block:
                labels = ((BLOCK_LABEL, f"{flavor}-b{r // block}"), *labels)
        made.append(SimNode(f"{flavor}-{i:0{width}d}", flavor, gpus_per_node, labels))
    return Cluster(tuple(made))


def combine(clusters: Iterable[Cluster]) -> Cluster:
    return Cluster(tuple(n for c in clusters for n in c.nodes))


_SPEC = re.compile(
    r"^\s*(?:(?P<flavor>[\w.\-/]+)\s*=\s*)?(?P<nodes>\d+)\s*x\s*(?P<gpus>\d+)"
    r"(?::rack=(?P<rack>\d+))?(?::block=(?P<block>\d+))?\s*$"
)


def parse_cluster_spec(spec: str) -> Cluster:
    """Parse "64x8" or "h100=32x8,l4=16x4" (N nodes × G GPUs per flavor; default flavor "gpu"),
    each maybe with racks and blocks: "80x8:rack=8:block=4" is 80 nodes in racks of 8 nodes,
    4 racks to a block."""
    parts = []
    for chunk in spec.split(","):
        m = _SPEC.match(chunk)
        if m is None or (m["block"] and not m["rack"]) or m["rack"] == "0" or m["block"] == "0":
            raise ValueError(
                f"cluster spec {chunk!r}: expected [FLAVOR=]NODESxGPUS[:rack=N[:block=M]], "
                "e.g. h100=80x8:rack=8:block=4"
            )
        parts.append(
            uniform_cluster(
                int(m["nodes"]),
                int(m["gpus"]),
                m["flavor"] or "gpu",
                int(m["rack"] or 0),
                int(m["block"] or 0),
            )
        )
    return combine(parts)


def offered_load(gpu_seconds: float, span_seconds: float, gpus: int) -> float:
    """Work asked for, as a fraction of what the cluster can do over the submission span."""
    return gpu_seconds / (span_seconds * gpus) if span_seconds > 0 and gpus > 0 else 0.0


def nodes_for_load(gpu_seconds: float, span_seconds: float, gpus_per_node: int, load: float) -> int:
    """How many nodes make `gpu_seconds` of work over `span_seconds` an offered load of `load`."""
    return max(1, round(gpu_seconds / (span_seconds * gpus_per_node * load)))
