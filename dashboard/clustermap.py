"""The cluster page: nodes grouped by flavor, a cell per GPU coloured by the team holding it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from dashboard.geometry import Cell, Share, node_cells, shared_gpus, team_colours
from gpuqueue.core.states import HOLDING
from gpuqueue.models import Flavor, Job, Node
from gpuqueue.services.cluster.inventory import node_capacity_by_flavor
from teams.models import Team


@dataclass(frozen=True)
class NodeView:
    name: str
    gpus: int
    ready: bool
    cordoned: bool
    drained: bool
    cells: list[Cell]

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.cordoned and not self.drained

    @property
    def status(self) -> str:
        if not self.ready:
            return "NotReady"
        if self.cordoned:
            return "cordoned"
        if self.drained:
            return "drained"
        return "ready"

    @property
    def used(self) -> float:
        """GPUs held: a shared GPU counts the thousandths its workers hold."""
        return sum(c.milli for c in self.cells) / 1000


@dataclass
class FlavorMap:
    flavor: str
    description: str
    nodes: list[NodeView] = field(default_factory=list)

    @property
    def capacity(self) -> int:
        return sum(n.gpus for n in self.nodes if n.ready)

    @property
    def allocated(self) -> float:
        return sum(n.used for n in self.nodes if n.ready)

    @property
    def free(self) -> float:
        return sum(n.gpus - n.used for n in self.nodes if n.schedulable)

    @property
    def unavailable(self) -> int:
        return sum(n.gpus for n in self.nodes if not n.schedulable)

    @property
    def utilization(self) -> int:
        return round(self.allocated * 100 / self.capacity) if self.capacity else 0


def cluster_map(visible_job_ids: set[int] | None = None) -> tuple[list[FlavorMap], dict[str, str]]:
    """Flavors with their nodes and cells, and the team colours used.

    Three queries: flavors, nodes, jobs holding GPUs. A cell names its job only when the
    viewer may see it (`visible_job_ids`; None means all); the team is shown to everyone, like
    the queue overview. A fractional job's workers share GPUs: on the GPU the cycle packed
    each on (`Job.gpu_devices`), drawn partly filled.
    """
    flavors = list(Flavor.objects.all())
    by_name = {f.name: f for f in flavors}
    holders: dict[tuple[str, str], list[tuple[str, int | None, int]]] = defaultdict(list)
    devices: dict[tuple[str, str], list[tuple[int, Share]]] = defaultdict(list)
    unpacked: dict[tuple[str, str], list[Share]] = defaultdict(list)
    rows: Any = (
        Job.objects.filter(state__in=HOLDING)
        .values_list(
            "id",
            "team__slug",
            "flavor__name",
            "gpus_per_worker",
            "placement",
            "gpu_milli",
            "gpu_devices",
        )
        .order_by("id")
    )
    for job_id, team, flavor, gpw, placement, milli, packed in rows:
        shown = job_id if visible_job_ids is None or job_id in visible_job_ids else None
        if milli:
            share = Share(team, shown, milli)
            placed = dict(placement or {})
            for node, index in packed or []:
                devices[(node, flavor)].append((int(index), share))
                placed[node] = int(placed.get(node, 0)) - 1
            for node, workers in placed.items():
                unpacked[(node, flavor)].extend([share] * max(int(workers), 0))
            continue
        for node, workers in (placement or {}).items():
            holders[(node, flavor)].append((team, shown, int(workers) * gpw))
    maps = {f.name: FlavorMap(f.name, f.description) for f in flavors}
    for node in Node.objects.order_by("name"):
        for flavor, gpus in node_capacity_by_flavor(
            node.capacity, node.labels, flavors, taints=node.taints, devices=node.devices
        ).items():
            kind = by_name[flavor]
            external = kind.gpus_held_by(int(node.used_externally.get(kind.resource_name, 0) or 0))
            key = (node.name, flavor)
            shared = shared_gpus(devices.get(key, []), unpacked.get(key, []), gpus)
            maps[flavor].nodes.append(
                NodeView(
                    node.name,
                    gpus,
                    node.ready,
                    node.cordoned,
                    node.drained,
                    node_cells(gpus, holders.get(key, []), external, shared),
                )
            )
    colours = team_colours(list(Team.objects.values_list("slug", flat=True)))
    return [m for m in maps.values() if m.nodes], colours
