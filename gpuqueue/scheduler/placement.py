"""Placement: which nodes a whole gang goes to, bin-pack (the default) or spread.

Placement reads the free-GPU buckets of a flavor, so that finding room costs a walk over a
handful of distinct free counts instead of every node. `extra` adds GPUs on some nodes (incoming
capacity of jobs being preempted, or GPUs a reservation holds that a backfill job may borrow).
On nodes that limit more than GPUs, a worker also needs its CPU, memory and a pod slot there
(`FlavorLedger.caps`); a flavor with no such node walks the buckets alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import itemgetter

from gpuqueue.scheduler.ledger import UNLIMITED, FlavorLedger, workers_in
from gpuqueue.scheduler.model import Placement, PlacementStrategy, PodAsk, by_ask


def fit_gang(
    fl: FlavorLedger,
    workers: int,
    gpus_per_worker: int,
    strategy: PlacementStrategy,
    extra: Mapping[str, int] | None = None,
    cpu: int = 0,
    memory: int = 0,
    incoming: bool = False,
) -> Placement | None:
    """Nodes for all `workers` at once, or None: a gang is never placed in part. Each worker
    asks `cpu` millicores and `memory` bytes; `incoming`: the room of jobs being preempted
    counts as theirs too (as their GPUs in `extra`)."""
    if workers <= 0 or gpus_per_worker <= 0:
        return None
    if not extra and fl.total_free < workers * gpus_per_worker:
        return None  # early exit: the flavor is too full for this gang whatever the layout
    cap = fl.caps(cpu, memory, incoming)
    if strategy is PlacementStrategy.SPREAD:
        return _spread(fl, workers, gpus_per_worker, extra or {}, cap)
    return _binpack(fl, workers, gpus_per_worker, extra or {}, cap)


def fit_on(
    avail: Mapping[str, int],
    workers: int,
    gpus_per_worker: int,
    strategy: PlacementStrategy,
    cap: Cap | None = None,
) -> Placement | None:
    """The same placement over a plain node -> free GPUs mapping (used for reservations), each
    node holding no more workers than `cap` says its room besides GPUs does.

    `fit_gang` on a ledger holding `avail` (nodes inserted by name) visits nodes by count, then
    name: one sort of the nodes gives that order without building the ledger (each starving
    job's reservation is placed this way on every plan).
    """
    if workers <= 0 or gpus_per_worker <= 0:
        return None
    g = gpus_per_worker
    if workers == 1 and strategy is not PlacementStrategy.SPREAD:
        # _binpack's first step for one worker, without the sort: the fullest node (fewest
        # GPUs, then name) that holds it (its second step finds no other).
        best: tuple[int, str] | None = None
        for node, count in avail.items():
            if (
                count >= g
                and (best is None or (count, node) < best)
                and (cap is None or cap(node) >= 1)
            ):
                best = (count, node)
        return None if best is None else ((best[1], 1),)
    if sum(v for v in avail.values() if v > 0) < workers * g:
        return None
    if strategy is PlacementStrategy.SPREAD:
        # _spread: the emptiest nodes first (by count, largest first, then name).
        room: list[tuple[str, int]] = []
        capacity = 0
        # By name, then (a stable sort) by count, largest first.
        for node, count in sorted(sorted(avail.items()), key=_COUNT, reverse=True):
            per_node = count // g
            if per_node <= 0:
                break
            if cap is not None:
                per_node = min(per_node, cap(node))
                if per_node <= 0:
                    continue
            room.append((node, per_node))
            capacity += per_node
            if len(room) >= workers:
                break
        if capacity < workers:
            return None
        return _deal(room, workers)
    # _binpack: the fullest single node that holds the gang, else the fullest nodes in turn.
    need = workers * g
    ordered = sorted(avail.items(), key=_COUNT_THEN_NAME)
    for node, count in ordered:
        if count >= need and (cap is None or cap(node) >= workers):
            return ((node, workers),)
    taken: dict[str, int] = {}
    left = workers
    for node, count in ordered:
        per_node = count // g
        if cap is not None and per_node > 0:
            per_node = min(per_node, cap(node))
        if per_node <= 0:
            continue
        take = min(per_node, left)
        taken[node] = take
        left -= take
        if left == 0:
            return tuple(sorted(taken.items()))
    return None


Cap = Callable[[str], int]  # node -> workers its room besides GPUs holds
_COUNT = itemgetter(1)  # of a (node, GPUs) pair
_COUNT_THEN_NAME = itemgetter(1, 0)


class _View:
    """Free GPUs per node as one count index: the flavor's buckets, with `extra` added."""

    __slots__ = ("boosted", "counts", "extra", "fl")

    def __init__(self, fl: FlavorLedger, extra: Mapping[str, int]) -> None:
        self.fl = fl
        self.extra = extra
        self.boosted: dict[int, list[str]] = {}
        for node in sorted(extra):
            count = max(fl.free.get(node, 0), 0) + extra[node]
            self.boosted.setdefault(count, []).append(node)
        self.counts = sorted(set(fl.buckets) | set(self.boosted))

    def nodes_with(self, count: int) -> Iterator[str]:
        """Nodes with exactly `count` GPUs available: plain bucket nodes, then boosted ones."""
        extra = self.extra
        for node in self.fl.buckets.get(count, ()):
            if node not in extra:
                yield node
        yield from self.boosted.get(count, ())


def _binpack(
    fl: FlavorLedger,
    workers: int,
    gpus_per_worker: int,
    extra: Mapping[str, int],
    cap: Cap | None,
) -> Placement | None:
    """1. The fullest single node that holds the whole gang (no cross-node traffic, no waste).
    2. Otherwise the fullest nodes that still hold a worker, filled in turn: small leftovers get
       used and empty nodes stay empty for the next big gang.
    A limited node holds no more workers than its room besides GPUs (`cap`).
    """
    need = workers * gpus_per_worker
    view = _View(fl, extra)
    counts = view.counts
    for count in counts:
        if count >= need:
            for node in view.nodes_with(count):
                if cap is None or cap(node) >= workers:
                    return ((node, workers),)
    chosen: dict[str, int] = {}
    left = workers
    for count in counts:
        per_node = count // gpus_per_worker
        if per_node <= 0:
            continue
        for node in view.nodes_with(count):
            if cap is not None:
                room = cap(node)
                if room <= 0:
                    continue
                take = min(per_node, room, left)
            else:
                take = min(per_node, left)
            chosen[node] = take
            left -= take
            if left == 0:
                return tuple(sorted(chosen.items()))
    return None


def _spread(
    fl: FlavorLedger,
    workers: int,
    gpus_per_worker: int,
    extra: Mapping[str, int],
    cap: Cap | None,
) -> Placement | None:
    """1. Take the emptiest nodes, one per worker where there are enough of them.
    2. Deal workers to them one at a time, round after round, so load is spread evenly.
    A limited node holds no more workers than its room besides GPUs (`cap`).
    """
    room: list[tuple[str, int]] = []
    capacity = 0
    view = _View(fl, extra)
    for count in reversed(view.counts):
        per_node = count // gpus_per_worker
        if per_node <= 0:
            break
        for node in view.nodes_with(count):
            here = per_node if cap is None else min(per_node, cap(node))
            if here <= 0:
                continue
            room.append((node, here))
            capacity += here
            if len(room) >= workers:
                break
        if len(room) >= workers:
            break
    if capacity < workers:
        return None
    return _deal(room, workers)


def _deal(room: list[tuple[str, int]], workers: int) -> Placement:
    """Spread's last step: one worker per node in `room` order, round after round, each node
    up to its room (the caller checked the room holds them all)."""
    chosen: dict[str, int] = {}
    left = workers
    while left:
        for node, per_node in room:
            if chosen.get(node, 0) < per_node:
                chosen[node] = chosen.get(node, 0) + 1
                left -= 1
                if left == 0:
                    break
    return tuple(sorted(chosen.items()))


def pods_fit(fl: FlavorLedger, pods: Sequence[PodAsk]) -> bool:
    """Whether a gang of pods of different asks fits the flavor's empty nodes as the engine
    places it on free GPUs (engine.Cycle._fit_pods): the pods of each ask in turn, largest
    first, bin-packed into what the ones before left, in GPUs and, where a node limits them,
    its allocatable CPU, memory and pods (step 1: never fits)."""
    free = dict(fl.capacity)
    unlimited = [UNLIMITED, UNLIMITED, UNLIMITED]
    room = {node: list(fl.allocatable.get(node, unlimited)) for node in free}
    for (gpus, cpu, memory), index in by_ask(pods):

        def cap(node: str, cpu: int = cpu, memory: int = memory) -> int:
            left = room[node]
            return workers_in((left[0], left[1], left[2]), cpu, memory)

        placed = fit_on(free, len(index), gpus, PlacementStrategy.BINPACK, cap)
        if placed is None:
            return False
        for node, n in placed:
            free[node] -= n * gpus
            left = room[node]
            left[0] -= n * cpu
            left[1] -= n * memory
            left[2] -= n
    return True
