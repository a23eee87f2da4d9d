"""Free GPUs per node, by node index: the simulator's single source of truth for capacity."""

from __future__ import annotations

from gpuqueue.scheduler.model import Placement
from gpuqueue.sim.cluster import Cluster


class Ledger:
    """Which GPUs are free. Policies read it (and copy `free` for their what-ifs); only the
    simulator changes it, after checking that a placement fits, so no GPU is ever given twice."""

    __slots__ = ("names", "index", "flavor", "capacity", "free", "by_flavor", "free_by_flavor")

    def __init__(self, cluster: Cluster) -> None:
        self.names: list[str] = [n.name for n in cluster.nodes]
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise ValueError("node names must be unique")
        self.flavor: list[str] = [n.flavor for n in cluster.nodes]
        self.capacity: list[int] = [n.gpus for n in cluster.nodes]
        self.free: list[int] = list(self.capacity)
        # Node indices per flavor, in cluster order: the candidates a placement looks at.
        self.by_flavor: dict[str, list[int]] = {}
        self.free_by_flavor: dict[str, int] = {}
        for i, f in enumerate(self.flavor):
            self.by_flavor.setdefault(f, []).append(i)
            self.free_by_flavor[f] = self.free_by_flavor.get(f, 0) + self.capacity[i]

    def check(self, placement: Placement, flavor: str, gpus_per_worker: int) -> str | None:
        """Why `placement` cannot be taken now, or None when it fits."""
        for name, workers in placement:
            i = self.index.get(name)
            if i is None:
                return f"unknown node {name}"
            if self.flavor[i] != flavor:
                return f"node {name} has {self.flavor[i]}, not {flavor}"
            if workers <= 0:
                return f"{workers} workers on {name}"
            if workers * gpus_per_worker > self.free[i]:
                return f"node {name}: {workers}×{gpus_per_worker} GPUs asked, {self.free[i]} free"
        if len({name for name, _ in placement}) != len(placement):
            return "a node appears twice"
        return None

    def take(self, placement: Placement, flavor: str, gpus_per_worker: int) -> None:
        for name, workers in placement:
            self.free[self.index[name]] -= workers * gpus_per_worker
        self.free_by_flavor[flavor] -= sum(w for _, w in placement) * gpus_per_worker

    def give_back(self, placement: Placement, flavor: str, gpus_per_worker: int) -> None:
        for name, workers in placement:
            i = self.index[name]
            self.free[i] += workers * gpus_per_worker
            assert self.free[i] <= self.capacity[i], f"node {name} over-released"
        self.free_by_flavor[flavor] += sum(w for _, w in placement) * gpus_per_worker
