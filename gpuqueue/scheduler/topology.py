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

import math
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuqueue.scheduler.horizon import AT_ONCE
from gpuqueue.scheduler.ledger import FlavorLedger, Ledger
from gpuqueue.scheduler.model import Node, PendingJob, Placement, PlacementStrategy, RunningJob
from gpuqueue.scheduler.placement import Cap, fit_on

HOSTNAME = "kubernetes.io/hostname"
_NONE: Mapping[str, int] = {}
_NO_LABELS: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class Domain:
    """One domain of one level: its path (the values of every level down to it) and nodes."""

    path: tuple[str, ...]
    nodes: tuple[str, ...]  # sorted by name
    # The paths of the domains around it, innermost first (its parent's, its grandparent's).
    around: tuple[tuple[str, ...], ...] = field(default=(), compare=False, repr=False)
    index: int = field(default=-1, compare=False, repr=False)  # among its level's, by path


_UNSEEN = Domain((), ())  # a running job not yet looked at (`victims_in_domain`)


@dataclass(frozen=True, slots=True)
class Found:
    """A placement inside one domain; `domain` as "label=value" ("" when it spans domains)."""

    placement: Placement
    domain: str


@dataclass(frozen=True, slots=True)
class Held:
    """What `Topology.start` found of a reservation's GPUs available per node, for
    `Topology.place_held`: their counts when one domain of the level holds the gang at once,
    else the domain that first came to hold it (None: none ever did)."""

    level: Level
    counts: Counts | None
    domain: Domain | None


@dataclass(frozen=True, slots=True)
class Best:
    """For a reason: the most workers one domain of a level holds now and when empty."""

    level: str
    fit: int
    empty: int
    domains: int


class Level:
    """One level of a flavor in one plan: its domains (sorted by path), node -> its domain,
    and the counts of the flavor's free GPUs on it that `Topology._counts` keeps: the GPUs
    (`DomainGPUs`) and per worker shape (GPUs, CPU, memory) the workers (`Counts`), each with
    how much of the flavor's `changed` it has read."""

    __slots__ = ("around", "domains", "gpus", "member", "name", "shapes", "within")

    def __init__(self, name: str, domains: list[Domain]) -> None:
        self.name = name  # its label key
        self.domains = domains
        self.member = {n: d for d in domains for n in d.nodes}
        # The paths of the domains around them, each with 0 GPUs (`DomainGPUs.around`).
        self.around = dict.fromkeys([p for d in domains for p in d.around], 0)
        self.gpus: tuple[int, DomainGPUs] | None = None
        self.shapes: dict[tuple[int, int, int], tuple[int, Counts]] = {}
        # Running job id -> the domain it lies wholly inside (None: none), once looked at
        # (`Topology.victims_in_domain`).
        self.within: dict[int, Domain | None] = {}


class Topology:
    """The domains of every flavor's levels in one plan, built when a job first asks.

    Per (flavor, level) a `Level`, made when a job first asks for it, keeps each domain's
    available GPUs, tightest first, and per worker shape (GPUs, CPU and memory per worker) on
    top of them its workers, each moved node by node as the flavor's ledger tells what changed
    (`FlavorLedger.changed`): the jobs of a cycle ask again and again of the same state, and a
    node's GPUs are counted once per level, whatever the shapes. `memo=False` counts afresh
    every time. A reservation's wait for one domain (`start`) counts the workers per domain
    once and is placed in what it counted (`place_held`).
    """

    __slots__ = ("_index", "_labels", "_largest", "_levels", "_sizes", "levels", "memo")

    def __init__(
        self, nodes: Sequence[Node], levels: Mapping[str, tuple[str, ...]], memo: bool = True
    ) -> None:
        self.levels = levels
        self.memo = memo
        self._labels = {n.name: n.labels for n in nodes} if levels else {}
        self._levels: dict[tuple[str, int], Level] = {}
        self._largest: dict[tuple[str, str, int], int] = {}
        # (flavor, level) -> per domain, (GPUs, how many of its nodes have them)
        self._sizes: dict[tuple[str, int], list[tuple[tuple[int, int], ...]]] = {}
        # (flavor, level) -> the level's (first) index among the flavor's: asked of every job
        self._index = {
            (f, key): i for f, keys in levels.items() for i, key in reversed(list(enumerate(keys)))
        }

    def level_of(self, job: PendingJob) -> int:
        """The index of the job's level among its flavor's, or -1 (none, or not a level of it:
        the web layer refuses those; a flavor whose levels changed since is placed anywhere)."""
        if not job.topology_level:
            return -1
        return self._index.get((job.flavor, job.topology_level), -1)

    def level(self, fl: FlavorLedger, index: int) -> Level:
        """Level `index` of the flavor, its domains among the flavor's schedulable nodes, made
        when a job first asks for it (the jobs of a flavor ask for a level or two of its
        several: the hosts of a large flavor, among others, are never made)."""
        found = self._levels.get((fl.name, index))
        if found is None:
            keys = self.levels[fl.name][: index + 1]
            labels_of = self._labels
            by_path: dict[tuple[str, ...], list[str]] = {}
            blanks = ("",) * len(keys)
            hosts = [i for i, k in enumerate(keys) if k == HOSTNAME]
            for node in fl.capacity:
                labels = labels_of.get(node, _NO_LABELS)
                path = tuple(map(labels.get, keys, blanks))
                for i in hosts:
                    if not path[i]:  # a node's hostname is its name when the label is missing
                        path = (*path[:i], node, *path[i + 1 :])
                if path[-1]:
                    by_path.setdefault(path, []).append(node)
            domains = [
                Domain(p, tuple(sorted(n)), tuple(p[:d] for d in range(len(p) - 1, 0, -1)), i)
                for i, (p, n) in enumerate(sorted(by_path.items()))
            ]
            found = self._levels[(fl.name, index)] = Level(keys[-1], domains)
        return found

    def domains(self, fl: FlavorLedger, level: int) -> list[Domain]:
        """The domains of `level` (`level`)."""
        return self.level(fl, level).domains

    def place(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        strategy: PlacementStrategy,
        extra: Mapping[str, int] | None = None,
        incoming: bool = False,
        strict: bool | None = None,
    ) -> Found | None:
        """The job's gang in the tightest domain of its level that holds it (a preferred
        level: of the first level, going outwards, where one does); None when none does.
        `extra` adds GPUs per node (held or incoming ones), `incoming` the room besides GPUs of
        jobs being preempted. `strict`: one domain of its level only (None: if it requires it).
        """
        level = self.level_of(job)
        if level < 0:
            return None
        cap = fl.caps(job.cpu_per_worker, job.memory_per_worker, incoming)
        if strict is None:
            strict = job.topology_required
        if extra or incoming:
            return self._place(
                fl, job, None, strategy, cap, level, strict, extra or _NONE, incoming
            )
        return self._place(fl, job, None, strategy, cap, level, strict)

    def pack(self, fl: FlavorLedger, job: PendingJob, strategy: PlacementStrategy) -> Found | None:
        """A job with no level, on a flavor with levels: in the tightest domain of the
        innermost level above the host that holds it (then outwards), as if it preferred that
        level, so that small jobs fill racks already broken into and leave whole racks whole;
        None when no domain holds it (then anywhere)."""
        levels = self.levels.get(fl.name)
        if not levels:
            return None
        level = len(levels) - 1
        if levels[level] == HOSTNAME:
            level -= 1
        if level < 0:
            return None
        cap = fl.caps(job.cpu_per_worker, job.memory_per_worker)
        return self._place(fl, job, None, strategy, cap, level, False)

    def place_on(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        avail: Mapping[str, int],
        strategy: PlacementStrategy,
        cap: Cap | None,
        level: int | None = None,
        strict: bool | None = None,
    ) -> Found | None:
        """`place` over GPUs available per node given as is (a reservation's)."""
        if level is None:
            level = self.level_of(job)
        if level < 0:
            return None
        if strict is None:
            strict = job.topology_required
        return self._place(fl, job, avail, strategy, cap, level, strict)

    def start(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        avail: dict[str, int],
        events: Sequence[tuple[float, str, int, int]],
        cap: Cap | None,
    ) -> tuple[float, Held]:
        """When one domain of the job's level is expected to hold its gang: at once
        (AT_ONCE), or as each event's GPUs (time, node, GPUs, job) are added to `avail` in
        turn, the time of the first after which one does (math.inf: none does); and what
        `place_held` then places in, without counting `avail` again."""
        level = self.level(fl, self.level_of(job))
        counts = Counts(level, job.gpus_per_worker, cap)
        counts.fill_workers(avail)
        if counts.most() >= job.workers:
            # One holds it at once (its workers' GPUs are within its GPUs): the GPUs too, for
            # the tightest.
            counts.gpus.fill(avail)
            return AT_ONCE, Held(level, counts, None)
        time, domain = counts.until_holds(events, avail, job.workers)
        return time, Held(level, None, domain)

    def place_held(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        avail: Mapping[str, int],
        held: Held,
        strategy: PlacementStrategy,
        cap: Cap | None,
    ) -> Found | None:
        """`place_on` in one domain of the job's level, over the `avail` that `start` counted:
        the tightest domain that holds the gang at once, else the one domain that came to."""
        domain = held.domain
        if held.counts is not None:
            domain = held.counts.tightest(job.workers, job.gpus)
        if domain is None:
            return None
        sub = {n: avail.get(n, 0) for n in domain.nodes}
        return self._fit_in(held.level, domain, sub, job, strategy, cap)

    def _place(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        avail: Mapping[str, int] | None,
        strategy: PlacementStrategy,
        cap: Cap | None,
        level: int,
        strict: bool,
        extra: Mapping[str, int] | None = None,
        incoming: bool = False,
    ) -> Found | None:
        """`avail`: GPUs available per node given as is; else the flavor's free GPUs, plus
        `extra` per node (held or incoming GPUs)."""
        workers = job.workers
        levels = range(level, level + 1) if strict else range(level, -1, -1)
        for lvl in levels:
            counts = self._counts(fl, job, lvl, avail, cap, extra, incoming)
            domain = counts.tightest(workers, job.gpus)
            if domain is None:
                continue
            if avail is not None:
                sub = {n: avail.get(n, 0) for n in domain.nodes}
            else:
                free = fl.free
                sub = {n: f if (f := free.get(n, 0)) > 0 else 0 for n in domain.nodes}
                if extra:
                    for n in domain.nodes:
                        sub[n] += extra.get(n, 0)
            found = self._fit_in(counts.gpus.level, domain, sub, job, strategy, cap)
            if found is not None:
                return found
        return None

    def _fit_in(
        self,
        level: Level,
        domain: Domain,
        sub: Mapping[str, int],
        job: PendingJob,
        strategy: PlacementStrategy,
        cap: Cap | None,
    ) -> Found | None:
        """The gang on `domain`'s nodes, with `sub` GPUs available on each."""
        placement = fit_on(sub, job.workers, job.gpus_per_worker, strategy, cap)
        if placement is None:
            return None
        return Found(placement, f"{level.name}={domain.path[-1]}")

    def _counts(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        lvl: int,
        avail: Mapping[str, int] | None,
        cap: Cap | None,
        extra: Mapping[str, int] | None = None,
        incoming: bool = False,
    ) -> Counts:
        """The GPUs and workers available in each domain of `lvl` (and GPUs in each domain
        around them): given `avail`, counted afresh; else the flavor's free GPUs, kept per
        (flavor, level, worker shape) and moved node by node as the ledger tells what changed
        (`FlavorLedger.changed`). `extra` GPUs per node (held or incoming) move a copy of the
        kept counts on just those nodes: a few nodes, where counting afresh reads them all."""
        level = self.level(fl, lvl)
        if avail is None and extra is not None and (not self.memo or (incoming and fl.room)):
            # Every node's room changes with what is incoming: counted afresh.
            free = fl.free
            avail = {n: (f if f > 0 else 0) + extra.get(n, 0) for n, f in free.items()}
        if avail is not None or not self.memo:
            counts = Counts(level, job.gpus_per_worker, cap)
            counts.fill(fl.free if avail is None else avail)
            return counts
        counts = self._kept(fl, level, job)
        if not extra:
            return counts
        moved = counts.copy()
        moved.cap = cap
        member, free = level.member, fl.free
        for node, more in extra.items():
            domain = member.get(node)
            if domain is not None and more:
                count = free.get(node, 0)
                moved.set(domain, node, (count if count > 0 else 0) + more)
        return moved

    def _kept(self, fl: FlavorLedger, level: Level, job: PendingJob) -> Counts:
        """The kept counts of the flavor's free GPUs on `level` for the job's worker shape,
        first moved on the nodes that changed since they were last asked for: the GPUs, once
        per level whatever the shape, then the shape's workers."""
        changed = fl.changed
        if changed is None:
            changed = fl.changed = []
        free, member = fl.free, level.member
        latest = len(changed)
        moved: set[str] | None = None  # the nodes changed since the GPUs were last moved
        since = latest
        if level.gpus is None:
            gpus = DomainGPUs(level)
            gpus.fill(free)
            level.gpus = (latest, gpus)
        else:
            since, gpus = level.gpus
            if since < latest:
                moved = set(changed[since:])
                for node in moved:
                    domain = member.get(node)
                    if domain is not None:
                        count = free.get(node, 0)
                        gpus.set(domain, node, count if count > 0 else 0)
                level.gpus = (latest, gpus)
        cpu, memory = job.cpu_per_worker, job.memory_per_worker
        shape = (job.gpus_per_worker, cpu, memory)
        kept = level.shapes.get(shape)
        if kept is None:
            counts = Counts(level, shape[0], fl.caps(cpu, memory), gpus)
            counts.fill_workers(free)
            level.shapes[shape] = (latest, counts)
        else:
            seen, counts = kept
            if seen < latest:
                counts.cap = fl.caps(cpu, memory)
                if moved is None or seen != since:
                    moved = set(changed[seen:])
                counts.move_workers(moved, free)
                level.shapes[shape] = (latest, counts)
        return counts

    def largest(self, fl: FlavorLedger, job: PendingJob) -> int:
        """The most workers of the job's GPUs one domain of its level holds when empty."""
        g = job.gpus_per_worker
        key = (fl.name, job.topology_level, g)
        most = self._largest.get(key)
        if most is None:
            level = self.level_of(job)
            sizes = self._sizes.get((fl.name, level))
            if sizes is None:
                # Each domain's nodes by their GPUs, once per level whatever the shapes asked.
                capacity = fl.capacity
                sizes = [
                    tuple(Counter([capacity[n] for n in d.nodes]).items())
                    for d in self.domains(fl, level)
                ]
                self._sizes[(fl.name, level)] = sizes
            most = max((sum(k * (c // g) for c, k in size) for size in sizes), default=0)
            self._largest[key] = most
        return most

    def best(self, fl: FlavorLedger, job: PendingJob) -> Best:
        """How close the job's level comes: the most workers one domain holds now, and empty."""
        level = self.level_of(job)
        cap = fl.caps(job.cpu_per_worker, job.memory_per_worker)
        counts = self._counts(fl, job, level, None, cap)
        name = counts.gpus.level.name
        return Best(name, counts.most(), self.largest(fl, job), len(counts.domains))

    def never(self, fl: FlavorLedger, job: PendingJob) -> Best | None:
        """For a required level: its numbers when no domain of it could hold the gang even
        empty (the job can never start), else None."""
        if not job.topology_required or self.level_of(job) < 0:
            return None
        if self.largest(fl, job) >= job.workers:
            return None
        return self.best(fl, job)

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
        level = self.level(fl, self.level_of(job))
        member = level.member
        within = level.within
        inside: dict[int, list[tuple[RunningJob, str]]] = {}  # domain's number -> candidates
        for victim, kind in candidates:
            domain = within.get(victim.id, _UNSEEN)
            if domain is _UNSEEN:
                domain = _one(member, victim.placement)
                within[victim.id] = domain
            if domain is not None:
                inside.setdefault(domain.index, []).append((victim, kind))
        # The domains whose GPUs, with all their candidates gone, would hold the gang's
        # workers: in no other could any of them be enough (room besides GPUs only lowers it).
        order: list[tuple[int, int, int, Domain, list[tuple[RunningJob, str]]]] = []
        free, incoming = fl.free, fl.incoming
        g, workers = job.gpus_per_worker, job.workers
        for i, theirs in inside.items():
            domain = level.domains[i]
            back: dict[str, int] = {}
            gain = 0
            for victim, _ in theirs:
                gain += victim.gpus
                for node, count in victim.placement:
                    back[node] = back.get(node, 0) + count * victim.gpus_per_worker
            here = most = 0
            for node in domain.nodes:
                count = free.get(node, 0)
                count = (count if count > 0 else 0) + incoming.get(node, 0)
                here += count
                most += (count + back.get(node, 0)) // g
            if here + gain >= job.gpus and most >= workers:
                order.append((-(here + gain), i, here, domain, theirs))
        order.sort(key=lambda t: (t[0], t[1]))  # (the numbers are in path order)
        need = job.gpus
        for _, _, here, domain, theirs in order:
            mark = ledger.checkpoint()
            chosen: list[tuple[RunningJob, str]] = []
            found: Found | None = None
            # The domain's GPUs with the chosen victims gone: placing is tried only once they
            # are enough (fewer never hold the gang).
            have = here
            for victim, kind in theirs:
                if len(chosen) >= budget:
                    break
                if not take(victim, kind):
                    continue
                chosen.append((victim, kind))
                have += victim.gpus
                if have < need:
                    continue
                found = self._in(fl, job, domain, strategy, cap, level)
                if found is not None and limit_ok():
                    break
                found = None
            if found is None:
                ledger.rollback(mark)
                continue
            for pair in reversed(chosen[:-1]):
                if have - pair[0].gpus < need:
                    continue
                ledger.unrelease(pair[0])
                again = self._in(fl, job, domain, strategy, cap, level)
                if again is not None and limit_ok():
                    chosen.remove(pair)
                    found = again
                    have -= pair[0].gpus
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
        level: Level,
    ) -> Found | None:
        """The gang on `domain`'s nodes, with their free and incoming GPUs."""
        incoming = fl.incoming
        sub = {n: max(fl.free.get(n, 0), 0) + incoming.get(n, 0) for n in domain.nodes}
        return self._fit_in(level, domain, sub, job, strategy, cap)


def _one(member: Mapping[str, Domain], placement: Placement) -> Domain | None:
    """The domain all of a placement's nodes are in (None: none, or several)."""
    if not placement:
        return None
    domain = member.get(placement[0][0])
    for node, _ in placement[1:]:
        if member.get(node) is not domain:
            return None
    return domain


class DomainGPUs:
    """GPUs available per domain of a level, node by node, and per domain around them (by
    path), whatever the workers' shape: the part of `Counts` that every shape of a level
    shares.

    The domains are also kept sorted by their GPUs (`order`), moved one at a time as a node
    changes: the tightest domain that holds a gang is found by bisection to the GPUs it needs,
    not by reading every domain (most racks of a busy cluster hold fewer).
    """

    __slots__ = ("around", "by_node", "level", "order", "own")

    def __init__(self, level: Level) -> None:
        self.level = level
        self.by_node: dict[str, int] = {}  # node -> GPUs counted
        self.own = [0] * len(level.domains)  # per domain (by index)
        self.around = dict(level.around)  # per path of a domain around others
        self.order: list[tuple[int, int]] = []  # (GPUs, index) of every domain

    def fill(self, source: Mapping[str, int]) -> None:
        """Count every node of the level afresh, with `source`'s GPUs."""
        by_node, own = self.by_node, self.own
        for node, domain in self.level.member.items():
            count = source.get(node, 0)
            if count <= 0:
                continue
            by_node[node] = count
            own[domain.index] += count
        around = self.around
        for domain in self.level.domains:
            count = own[domain.index]
            if count:
                for outer in domain.around:
                    around[outer] += count
        self.order = sorted([(count, i) for i, count in enumerate(own)])

    def copy(self) -> DomainGPUs:
        other = DomainGPUs.__new__(DomainGPUs)
        other.level = self.level
        other.by_node = dict(self.by_node)
        other.own = list(self.own)
        other.around = dict(self.around)
        other.order = list(self.order)
        return other

    def set(self, domain: Domain, node: str, count: int) -> None:
        """Count `node` of `domain` with `count` GPUs available (`count` at least 0)."""
        old = self.by_node.get(node, 0)
        if count == old:
            return
        self.by_node[node] = count
        i = domain.index
        order = self.order
        before = self.own[i]
        del order[bisect_left(order, (before, i))]
        insort(order, (before + count - old, i))
        self.own[i] = before + count - old
        around = self.around
        for outer in domain.around:
            around[outer] += count - old


class Counts:
    """GPUs (`DomainGPUs`, which shapes of one level may share) and workers of one shape
    available per domain of a level, node by node, for the tightest domain that holds a gang:
    its own GPUs fewest, then its parent's, its grandparent's, then its path."""

    __slots__ = ("by_node", "cap", "fit", "g", "gpus", "_most")

    def __init__(
        self, level: Level, g: int, cap: Cap | None, gpus: DomainGPUs | None = None
    ) -> None:
        self.gpus = DomainGPUs(level) if gpus is None else gpus
        self.g = g
        self.cap = cap
        self.by_node: dict[str, int] = {}  # node -> workers counted
        self.fit = [0] * len(level.domains)  # workers per domain (by index)
        self._most: int | None = None  # the most workers of one domain, while it holds

    @property
    def domains(self) -> Sequence[Domain]:
        return self.gpus.level.domains

    def fill(self, source: Mapping[str, int]) -> None:
        """Count every node of the level afresh, with `source`'s GPUs: these counts' own
        GPUs, then their workers."""
        self.gpus.fill(source)
        self.fill_workers(source)

    def fill_workers(self, source: Mapping[str, int]) -> None:
        """Count the workers of every node of the level afresh (its GPUs counted apart)."""
        g, cap = self.g, self.cap
        by_node, fit = self.by_node, self.fit
        for node, domain in self.gpus.level.member.items():
            count = source.get(node, 0)
            if count < g:
                continue
            per_node = count // g
            if cap is not None:
                per_node = min(per_node, cap(node))
            by_node[node] = per_node
            fit[domain.index] += per_node
        self._most = None

    def copy(self) -> Counts:
        """The same counts, to move apart from these (a what-if: GPUs held or incoming)."""
        other = Counts.__new__(Counts)
        other.gpus = self.gpus.copy()
        other.g, other.cap = self.g, self.cap
        other.by_node = dict(self.by_node)
        other.fit = list(self.fit)
        other._most = self._most
        return other

    def set(self, domain: Domain, node: str, count: int) -> None:
        """Count `node` of `domain` with `count` GPUs available (its room from `cap`)."""
        count = count if count > 0 else 0
        self.gpus.set(domain, node, count)
        self.set_workers(domain, node, count)

    def move_workers(self, nodes: Iterable[str], source: Mapping[str, int]) -> None:
        """Count the workers of `nodes` (those of the level) again, with `source`'s GPUs (their
        GPUs are counted apart): `set_workers` on each."""
        g, cap = self.g, self.cap
        by_node, fit = self.by_node, self.fit
        member = self.gpus.level.member
        for node in nodes:
            domain = member.get(node)
            if domain is None:
                continue
            count = source.get(node, 0)
            per_node = count // g if count > 0 else 0
            if cap is not None and per_node > 0:
                per_node = min(per_node, cap(node))
            old = by_node.get(node, 0)
            if per_node != old:
                by_node[node] = per_node
                i = domain.index
                was = fit[i]
                fit[i] = was + per_node - old
                most = self._most
                # The most of one domain stays known unless the domain that had it lost some.
                if most is not None and (fit[i] > most or (was == most and fit[i] < was)):
                    self._most = fit[i] if fit[i] > most else None

    def set_workers(self, domain: Domain, node: str, count: int) -> None:
        """Count the workers of `node` of `domain` with `count` (at least 0) GPUs available
        (its room from `cap`); its GPUs are counted apart (`DomainGPUs.set`)."""
        per_node = count // self.g
        if self.cap is not None and per_node > 0:
            per_node = min(per_node, self.cap(node))
        old = self.by_node.get(node, 0)
        if per_node != old:
            self.by_node[node] = per_node
            self.fit[domain.index] += per_node - old
            self._most = None

    def until_holds(
        self,
        events: Sequence[tuple[float, str, int, int]],
        avail: dict[str, int],
        workers: int,
    ) -> tuple[float, Domain | None]:
        """Add each event's GPUs (time, node, GPUs, job) to `avail` in turn until one domain
        has room for the gang's `workers` (none has before the first): the time of that event
        and the domain, the only one with room then; or math.inf and None. Counts only each
        domain's own workers on the way: their GPUs are within the domain's, and the counts
        are dropped after (`order` and the GPUs are left behind)."""
        g, cap = self.g, self.cap
        by_node, fit = self.by_node, self.fit
        member = self.gpus.level.member
        self._most = None
        for time, node, gpus, _ in events:
            old = avail.get(node)
            if old is None:
                continue
            count = old + gpus
            avail[node] = count
            domain = member.get(node)
            if domain is None:
                continue
            per_node = count // g if count > 0 else 0
            if cap is not None and per_node > 0:
                per_node = min(per_node, cap(node))
            before = by_node.get(node, 0)
            if per_node == before:
                continue  # (its domain has no more room than before: none)
            by_node[node] = per_node
            here = fit[domain.index] + per_node - before
            fit[domain.index] = here
            if here >= workers:
                return time, domain
        return math.inf, None

    def tightest(self, workers: int, need: int) -> Domain | None:
        """The domain with the fewest GPUs of those with `need` GPUs and room for `workers`
        (ties: the fewest around it, then the path); None when none has."""
        fit, order = self.fit, self.gpus.order
        fewest = -1  # the GPUs of the first domain that holds the gang, and such domains
        tied: list[int] = []
        for k in range(bisect_left(order, (need,)), len(order)):
            here, i = order[k]
            if fewest >= 0 and here > fewest:
                break
            if fit[i] >= workers:
                fewest = here
                tied.append(i)
        domains = self.gpus.level.domains
        if len(tied) <= 1:
            return domains[tied[0]] if tied else None
        # Of domains with as many GPUs: the fewest in its parent, its grandparent, ..., then
        # the path (`tied` is in path order).
        around = self.gpus.around
        best: Domain | None = None
        least: list[int] = []
        for i in tied:
            domain = domains[i]
            totals = [around[outer] for outer in domain.around]
            if best is None or totals < least:
                best, least = domain, totals
        return best

    def most(self) -> int:
        if self._most is None:
            self._most = max(self.fit, default=0)
        return self._most
