"""Topology: a gang inside one domain of a level (a block, a rack, an NVLink domain, a host).

A flavor's levels are node label keys, outermost first (`Snapshot.topologies`), as Kueue's
Topology (`spec.levels[].nodeLabel`) and KAI's Topology list them. A domain of a level is the
nodes that share its label's value under the same outer values: rack r1 of block b1 and rack
r1 of block b2 are two racks. A node without a level's label is in no domain of that level;
`kubernetes.io/hostname` is the node's name when the label is missing.

A job asks for one level (`PendingJob.topology_level`):
- required: all its workers in one domain of that level, or it waits (`NO_DOMAIN`);
- preferred: one domain of that level if one holds it, else one domain of the next level out,
  and so on; else anywhere.

Of the domains that hold the gang, the tightest wins: the fewest GPUs available in it, then in
its parent domain, and so on outwards, then the path (deterministic). Gangs fill domains that
are already broken into, and empty racks and blocks stay whole for the gangs that need them
(fragmentation one level up). Inside the domain, the flavor's placement (bin-pack or spread)
chooses the nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpuqueue.scheduler.ledger import FlavorLedger, Ledger
from gpuqueue.scheduler.model import Node, PendingJob, Placement, PlacementStrategy, RunningJob
from gpuqueue.scheduler.placement import Cap, fit_on

HOSTNAME = "kubernetes.io/hostname"
_NONE: Mapping[str, int] = {}


@dataclass(frozen=True, slots=True)
class Domain:
    """One domain of one level: its path (the values of every level down to it) and nodes."""

    path: tuple[str, ...]
    nodes: tuple[str, ...]  # sorted by name


@dataclass(frozen=True, slots=True)
class Found:
    """A placement inside one domain; `domain` as "label=value" ("" when it spans domains)."""

    placement: Placement
    domain: str


@dataclass(frozen=True, slots=True)
class Best:
    """For a reason: the most workers one domain of a level holds now and when empty."""

    level: str
    fit: int
    empty: int
    domains: int


class Topology:
    """The domains of every flavor's levels in one plan, built when a job first asks."""

    __slots__ = ("_domains", "_labels", "levels")

    def __init__(self, nodes: Sequence[Node], levels: Mapping[str, tuple[str, ...]]) -> None:
        self.levels = levels
        self._labels = {n.name: n.labels for n in nodes} if levels else {}
        self._domains: dict[tuple[str, int], list[Domain]] = {}

    def level_of(self, job: PendingJob) -> int:
        """The index of the job's level among its flavor's, or -1 (none, or not a level of it:
        the web layer refuses those; a flavor whose levels changed since is placed anywhere)."""
        if not job.topology_level:
            return -1
        levels = self.levels.get(job.flavor)
        if not levels or job.topology_level not in levels:
            return -1
        return levels.index(job.topology_level)

    def domains(self, fl: FlavorLedger, level: int) -> list[Domain]:
        """The domains of `level` among the flavor's schedulable nodes."""
        key = (fl.name, level)
        found = self._domains.get(key)
        if found is None:
            keys = self.levels[fl.name][: level + 1]
            members: dict[tuple[str, ...], list[str]] = {}
            for node in fl.capacity:
                labels = self._labels.get(node, _NONE)
                path = tuple(_value(labels, k, node) for k in keys)
                if path[-1]:
                    members.setdefault(path, []).append(node)
            found = [Domain(path, tuple(sorted(n))) for path, n in sorted(members.items())]
            self._domains[key] = found
        return found

    def place(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        strategy: PlacementStrategy,
        extra: Mapping[str, int] | None = None,
        cap: Cap | None = None,
    ) -> Found | None:
        """The job's gang in the tightest domain of its level that holds it (a preferred
        level: of the first level, going outwards, where one does); None when none does."""
        level = self.level_of(job)
        free = fl.free
        extra = extra or _NONE
        avail = {n: (f if f > 0 else 0) + extra.get(n, 0) for n, f in free.items()}
        return self.place_on(fl, job, avail, strategy, cap, level)

    def place_on(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        avail: Mapping[str, int],
        strategy: PlacementStrategy,
        cap: Cap | None,
        level: int | None = None,
    ) -> Found | None:
        """`place` over GPUs available per node given as is (a reservation's)."""
        if level is None:
            level = self.level_of(job)
        if level < 0:
            return None
        g = job.gpus_per_worker
        workers = job.workers
        need = workers * g
        levels = range(level, level + 1) if job.topology_required else range(level, -1, -1)
        for lvl in levels:
            domains = self.domains(fl, lvl)
            if not domains:
                continue
            # GPUs available per domain of every level down to this one (keys: paths).
            totals: dict[tuple[str, ...], int] = {}
            fitting: list[tuple[int, Domain]] = []
            for domain in domains:
                total = 0
                fit = 0
                for node in domain.nodes:
                    count = avail.get(node, 0)
                    total += count
                    per_node = count // g
                    if cap is not None and per_node > 0:
                        per_node = min(per_node, cap(node))
                    fit += per_node
                path = domain.path
                for depth in range(1, len(path)):
                    outer = path[:depth]
                    totals[outer] = totals.get(outer, 0) + total
                if total >= need and fit >= workers:
                    fitting.append((total, domain))
            if not fitting:
                continue
            # The tightest: its own GPUs, then its parent's, grandparent's (`totals` is
            # complete once every domain was counted), then its path.
            chosen = min(fitting, key=lambda t: (t[0], *_outer_key(t[1], totals)))[1]
            sub = {n: avail.get(n, 0) for n in chosen.nodes}
            placement = fit_on(sub, workers, g, strategy, cap)
            if placement is not None:
                return Found(placement, f"{self.levels[fl.name][lvl]}={chosen.path[-1]}")
        return None

    def best(self, fl: FlavorLedger, job: PendingJob, cap: Cap | None) -> Best:
        """How close the job's level comes: the most workers one domain holds now, and empty."""
        level = self.level_of(job)
        name = self.levels[fl.name][level]
        g = job.gpus_per_worker
        most = empty = 0
        domains = self.domains(fl, level)
        capacity = fl.capacity
        for domain in domains:
            fit = 0
            whole = 0
            for node in domain.nodes:
                free = fl.free.get(node, 0)
                per_node = (free if free > 0 else 0) // g
                if cap is not None and per_node > 0:
                    per_node = min(per_node, cap(node))
                fit += per_node
                whole += capacity.get(node, 0) // g
            most = max(most, fit)
            empty = max(empty, whole)
        return Best(name, most, empty, len(domains))

    def never(self, fl: FlavorLedger, job: PendingJob) -> Best | None:
        """For a required level: its numbers when no domain of it could hold the gang even
        empty (the job can never start), else None."""
        if not job.topology_required or self.level_of(job) < 0:
            return None
        best = self.best(fl, job, None)
        return best if best.empty < job.workers else None

    def victims_in_domain(
        self,
        fl: FlavorLedger,
        ledger: Ledger,
        job: PendingJob,
        candidates: Sequence[tuple[RunningJob, str]],
        take: Callable[[RunningJob, str], bool],
        limit_ok: Callable[[], bool],
        budget: int,
        strategy: PlacementStrategy,
        cap: Cap | None,
    ) -> tuple[list[tuple[RunningJob, str]], Found] | None:
        """Victims that free room for a required level inside one domain, and the placement
        there: for each domain (the most GPUs available with its candidates gone first),
        release its candidates in rule order (`take`) until the gang fits there, then give
        back those not needed, most valuable first. On success the ledger keeps the victims
        released (the caller commits); on failure it is as it was.

        Only candidates wholly inside the domain are taken: a victim that spans two racks frees
        half a rack for the job and half a rack for nobody.
        """
        level = self.level_of(job)
        order: list[tuple[int, Domain, list[tuple[RunningJob, str]]]] = []
        for domain in self.domains(fl, level):
            members = set(domain.nodes)
            inside = [
                (v, kind) for v, kind in candidates if all(n in members for n, _ in v.placement)
            ]
            if not inside:
                continue
            here = sum(max(fl.free.get(n, 0), 0) + fl.incoming.get(n, 0) for n in domain.nodes)
            gain = sum(v.gpus for v, _ in inside)
            if here + gain >= job.gpus:
                order.append((-(here + gain), domain, inside))
        order.sort(key=lambda t: (t[0], t[1].path))
        for _, domain, inside in order:
            mark = ledger.checkpoint()
            chosen: list[tuple[RunningJob, str]] = []
            found = None
            for victim, kind in inside:
                if len(chosen) >= budget:
                    break
                if not take(victim, kind):
                    continue
                chosen.append((victim, kind))
                found = self._in(fl, job, domain, strategy, cap, level)
                if found is not None and limit_ok():
                    break
                found = None
            if found is None:
                ledger.rollback(mark)
                continue
            for pair in reversed(chosen[:-1]):
                ledger.unrelease(pair[0])
                again = self._in(fl, job, domain, strategy, cap, level)
                if again is not None and limit_ok():
                    chosen.remove(pair)
                    found = again
                else:
                    ledger.release(pair[0])
            ledger.commit(mark)
            return chosen, found
        return None

    def _in(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        domain: Domain,
        strategy: PlacementStrategy,
        cap: Cap | None,
        level: int,
    ) -> Found | None:
        incoming = fl.incoming
        sub = {n: max(fl.free.get(n, 0), 0) + incoming.get(n, 0) for n in domain.nodes}
        placement = fit_on(sub, job.workers, job.gpus_per_worker, strategy, cap)
        if placement is None:
            return None
        return Found(placement, f"{self.levels[fl.name][level]}={domain.path[-1]}")


def _value(labels: Mapping[str, str], key: str, node: str) -> str:
    value = labels.get(key, "")
    if not value and key == HOSTNAME:
        return node
    return value


def _outer_key(domain: Domain, totals: Mapping[tuple[str, ...], int]) -> tuple[object, ...]:
    """The parent domain's available GPUs, then the grandparent's, and so on, then the path."""
    path = domain.path
    return (*(totals.get(path[:depth], 0) for depth in range(len(path) - 1, 0, -1)), path)
