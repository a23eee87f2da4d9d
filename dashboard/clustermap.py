"""The cluster page: nodes grouped by flavor, a cell per GPU coloured by the team holding it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from dashboard.geometry import Cell, node_cells, team_colours
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
    def used(self) -> int:
        return sum(1 for c in self.cells if c.team is not None)


@dataclass
class FlavorMap:
    flavor: str
    description: str
    nodes: list[NodeView] = field(default_factory=list)

    @property
    def capacity(self) -> int:
        return sum(n.gpus for n in self.nodes if n.ready)

    @property
    def allocated(self) -> int:
        return sum(n.used for n in self.nodes if n.ready)

    @property
    def free(self) -> int:
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
    the queue overview.
    """
    flavors = list(Flavor.objects.all())
    by_resource = {f.name: f.resource_name for f in flavors}
    holders: dict[tuple[str, str], list[tuple[str, int | None, int]]] = defaultdict(list)
    rows: Any = (
        Job.objects.filter(state__in=HOLDING)
        .values_list("id", "team__slug", "flavor__name", "gpus_per_worker", "placement")
        .order_by("id")
    )
    for job_id, team, flavor, gpw, placement in rows:
        shown = job_id if visible_job_ids is None or job_id in visible_job_ids else None
        for node, workers in (placement or {}).items():
            holders[(node, flavor)].append((team, shown, int(workers) * gpw))
    maps = {f.name: FlavorMap(f.name, f.description) for f in flavors}
    for node in Node.objects.order_by("name"):
        for flavor, gpus in node_capacity_by_flavor(
            node.capacity, node.labels, flavors, taints=node.taints
        ).items():
            external = int(node.used_externally.get(by_resource[flavor], 0) or 0)
            maps[flavor].nodes.append(
                NodeView(
                    node.name,
                    gpus,
                    node.ready,
                    node.cordoned,
                    node.drained,
                    node_cells(gpus, holders.get((node.name, flavor), []), external),
                )
            )
    colours = team_colours(list(Team.objects.values_list("slug", flat=True)))
    return [m for m in maps.values() if m.nodes], colours
