"""The tentative ledger: who holds which GPUs, with checkpoint and rollback.

Every decision of a cycle (admit, preempt, reserve) is written here first. A what-if (does this
gang fit if these jobs leave?) takes a checkpoint, changes the ledger, and rolls back if the answer
is no, so that a gang is placed whole or not at all and a failed victim search leaves no trace
(the idea of KAI's `Statement`).

Per flavor the ledger keeps, for each schedulable node:
- `free`: GPUs nobody holds and no reservation holds, indexed by count in `buckets` so that
  placement finds "the fullest node with at least k free" without scanning every node;
- `incoming`: GPUs of jobs being preempted that nobody has claimed yet (capacity on its way back;
  those promised to a pending job join once that job is decided, `come_back`);
- `held`: GPUs a reservation keeps for a starving job (only backfill may use them).

Per node that limits more than GPUs (`Node.limited`) it keeps the room a worker needs besides
its GPUs: CPU, memory and pods left (`room`), and what jobs being preempted give back
(`room_incoming`). A flavor none of whose nodes limits them reads none of it (`FlavorLedger.room`
is None): placement and counts then walk the free-GPU buckets alone.

Per group (a team, or a department) and flavor it keeps `used` (GPUs held or promised),
`leaving` (the part of `used` that is being preempted) and `nonpreemptible` usage, in whole
GPUs, and what fractional jobs hold in thousandths of a GPU (`used_milli`,
`nonpreemptible_milli`; shared_gpus.py), so that whole-GPU arithmetic stays in integers.

Every change goes through a method here, which moves `Ledger.stamp` (and the flavor's
`FlavorLedger.version`): an answer computed from the ledger may be kept while the stamp it was
computed at is current, and no caller has to say when it is not.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from operator import attrgetter
from typing import NamedTuple

from gpuqueue.scheduler.model import (
    Node,
    NodeAsk,
    PendingJob,
    Placement,
    RunningJob,
    whole_workers,
)

Undo = Callable[[], None]
_NAME = attrgetter("name")

# Room for workers on a node besides GPUs: (CPU millicores, memory bytes, pods) left.
Room = tuple[int, int, int]
UNLIMITED = 1 << 62  # a resource the node does not limit
RESOURCES = ("cpu", "memory", "pods")


def workers_in(room: Room, cpu: int, memory: int) -> int:
    """How many workers asking `cpu` and `memory` each, and a pod, fit in `room`."""
    most = room[2]
    if cpu and room[0] // cpu < most:
        most = room[0] // cpu
    if memory and room[1] // memory < most:
        most = room[1] // memory
    return most if most > 0 else 0


def short_resource(room: Room, cpu: int, memory: int) -> int:
    """Which resource of `room` (an index into RESOURCES) holds the fewest such workers."""
    counts = (room[0] // cpu if cpu else UNLIMITED, room[1] // memory if memory else UNLIMITED)
    return min(range(3), key=lambda i: (counts[i] if i < 2 else room[2], i))


def node_room(node: Node) -> tuple[Room, Room]:
    """A limited node's allocatable room, and what is left of it after others' pods."""
    allocatable = (
        UNLIMITED if node.cpu is None else node.cpu,
        UNLIMITED if node.memory is None else node.memory,
        UNLIMITED if node.pods is None else node.pods,
    )
    left = (
        allocatable[0] - node.cpu_used_externally,
        allocatable[1] - node.memory_used_externally,
        allocatable[2] - node.pods_used_externally,
    )
    return allocatable, left


def buckets_after(
    buckets: Mapping[int, dict[str, None]], moved: Mapping[str, int]
) -> dict[int, dict[str, None]]:
    """Free-GPU buckets after the nodes of `moved` went to their new counts: each node that
    did not move keeps its place in its bucket, moved nodes follow in the order of `moved`
    (as one `move` per node would leave them; placement takes nodes in bucket order)."""
    result: dict[int, dict[str, None]] = {}
    for count, nodes in buckets.items():
        for node in nodes:
            if node not in moved:
                bucket = result.get(count)
                if bucket is None:
                    result[count] = {node: None}
                else:
                    bucket[node] = None
    for node, new in moved.items():
        bucket = result.get(new)
        if bucket is None:
            result[new] = {node: None}
        else:
            bucket[node] = None
    return result


class FlavorLedger:
    """The GPUs of one flavor, node by node."""

    __slots__ = (
        "_capped",
        "_fits",
        "_most",
        "_short",
        "allocatable",
        "buckets",
        "capacity",
        "changed",
        "free",
        "gpu_team",
        "held",
        "incoming",
        "max_node",
        "memo",
        "name",
        "others_leave",
        "room",
        "room_incoming",
        "shared",
        "sizes",
        "total_capacity",
        "total_free",
        "version",
    )

    def __init__(self, name: str, memo: bool = True) -> None:
        self.name = name
        self.free: dict[str, int] = {}
        # free count -> nodes with exactly that many free GPUs; dicts keep a deterministic order.
        self.buckets: dict[int, dict[str, None]] = {}
        self.incoming: dict[str, int] = {}
        self.held: dict[str, int] = {}
        self.total_free = 0
        # The largest schedulable node and all of them, counting GPUs that others hold: those
        # come free in time, so only these say that a job can never start.
        self.max_node = 0
        self.total_capacity = 0
        self.sizes: dict[int, int] = {}  # GPUs per schedulable node -> how many such nodes
        self.capacity: dict[str, int] = {}  # GPUs each node offers
        # (GPUs, CPU, memory per worker) -> `most_workers`
        self._most: dict[tuple[int, int, int], int] = {}
        # The ledger's room tables (module docstring) when a node of this flavor limits more
        # than GPUs, else None; and the limited nodes' allocatable room.
        self.room: dict[str, Room] | None = None
        self.room_incoming: dict[str, Room] = {}
        self.allocatable: dict[str, Room] = {}
        self.others_leave: dict[str, Room] = {}  # allocatable less what others' pods request
        self._short: dict[tuple[int, int, int], tuple[int, Short | None]] = {}
        # Moved by every change of `free`, `incoming` or `held` (the methods below).
        self.version = 0
        # (GPUs per worker, what is added to free) -> (version, workers that fit): most jobs
        # of a busy cycle ask how many of their workers fit and change nothing. Off
        # (`memo=False`), every count is made afresh.
        self.memo = memo
        self._fits: dict[tuple[int, str, int, int], tuple[int, int]] = {}
        # On a limited flavor, (GPUs, CPU, memory per worker) -> workers that fit on free GPUs
        # and room, kept up to date node by node (`_recount`) rather than counted afresh after
        # every change: a count walks every node with a worker's GPUs free.
        self._capped: dict[tuple[int, int, int], int] = {}
        # On a shared flavor, node -> GPU index -> thousandths used, for each GPU that
        # fractional work opened (shared_gpus.py); such a GPU is out of `free`. None: not shared.
        self.shared: dict[str, dict[int, int]] | None = None
        # On a shared flavor whose GPUs serve one team each (Snapshot.team_gpu_flavors), the
        # team that opened each GPU, (node, index) -> team; None: any team may share one.
        self.gpu_team: dict[tuple[str, int], str] | None = None
        # Nodes whose free GPUs or room changed, in order, for whoever keeps counts of its
        # own node by node (topology.py reads from where it last stopped); None: nobody does.
        self.changed: list[str] | None = None

    def add_node(self, node: str, free: int, capacity: int) -> None:
        """A schedulable node offering `capacity` GPUs, `free` of them free (setup)."""
        self.version += 1
        self.free[node] = free
        self.buckets.setdefault(free, {})[node] = None
        self.total_free += max(free, 0)
        self.total_capacity += capacity
        self.capacity[node] = capacity
        self.max_node = max(self.max_node, capacity)
        self.sizes[capacity] = self.sizes.get(capacity, 0) + 1
        self._most.clear()
        self._capped.clear()

    def most_workers(self, gpus_per_worker: int, cpu: int = 0, memory: int = 0) -> int:
        """How many workers of this size the empty nodes hold (model.whole_workers; on limited
        nodes, as many as their allocatable CPU, memory and pods hold too), counted once per
        size: step 1 of every decision asks, and the nodes are set up once."""
        key = (gpus_per_worker, cpu, memory) if self.room is not None else (gpus_per_worker, 0, 0)
        most = self._most.get(key)
        if most is None:
            if self.room is None:
                most = whole_workers(self.sizes, gpus_per_worker)
            else:
                most = 0
                allocatable = self.allocatable
                for node, gpus in self.capacity.items():
                    per_node = gpus // gpus_per_worker
                    room = allocatable.get(node)
                    if room is not None and per_node > 0:
                        per_node = min(per_node, workers_in(room, cpu, memory))
                    most += per_node
            self._most[key] = most
        return most

    def never_short(self, gpus_per_worker: int, cpu: int, memory: int) -> Short | None:
        """Which resource besides GPUs stops the empty nodes from holding the gang: the one
        whose allocatable amounts alone hold the fewest workers (below what their GPUs hold),
        with what a worker asks of it and the most any node of enough GPUs offers. None when
        GPUs alone are the cause (never fits)."""
        if self.room is None:
            return None
        unlimited = (UNLIMITED, UNLIMITED, UNLIMITED)
        best = [0, 0, 0]
        held = [0, 0, 0]  # workers the nodes hold, counting GPUs and one resource
        by_gpus = 0
        asked = (cpu, memory, 1)
        for node, gpus in self.capacity.items():
            per_node = gpus // gpus_per_worker
            if per_node <= 0:
                continue
            by_gpus += per_node
            room = self.allocatable.get(node, unlimited)
            for i in range(3):
                best[i] = max(best[i], room[i])
                fit = room[i] // asked[i] if asked[i] else per_node
                held[i] += min(per_node, fit)
        i = min(range(3), key=lambda i: (held[i], i))
        if held[i] >= by_gpus:
            return None
        return Short("", 0, RESOURCES[i], best[i], best[i], asked[i])

    def caps_without_ours(self, cpu: int, memory: int) -> Callable[[str], int] | None:
        """`caps` once gpuqueue's own running jobs are gone: the room others' pods leave
        (reservations: the jobs they wait for end in time, others' pods may not)."""
        if self.room is None:
            return None
        left = self.others_leave

        def cap(node: str) -> int:
            room = left.get(node)
            return UNLIMITED if room is None else workers_in(room, cpu, memory)

        return cap

    def caps(self, cpu: int, memory: int, incoming: bool = False) -> Callable[[str], int] | None:
        """Per node, how many workers asking `cpu` and `memory` its room holds (with what jobs
        being preempted give back if `incoming`); None when no node of the flavor limits."""
        room = self.room
        if room is None:
            return None
        back = self.room_incoming if incoming else None

        def cap(node: str) -> int:
            left = room.get(node)
            if left is None:
                return UNLIMITED
            if back:
                more = back.get(node)
                if more is not None:
                    left = (left[0] + more[0], left[1] + more[1], left[2] + more[2])
            return workers_in(left, cpu, memory)

        return cap

    def workers_with(self, node: str, gpus: int, more: Room, job: PendingJob) -> int:
        """How many of `job`'s workers a limited node holds with `gpus` available and its room
        and incoming room plus `more` (a victim search's what-if)."""
        left = self.room[node] if self.room is not None else (UNLIMITED, UNLIMITED, UNLIMITED)
        back = self.room_incoming.get(node, (0, 0, 0))
        room = (
            left[0] + back[0] + more[0],
            left[1] + back[1] + more[1],
            left[2] + back[2] + more[2],
        )
        per_node = gpus // job.gpus_per_worker
        return min(per_node, workers_in(room, job.cpu_per_worker, job.memory_per_worker))

    def short(self, gpus_per_worker: int, cpu: int, memory: int) -> Short | None:
        """The node whose free GPUs hold the most workers that its CPU, memory or pods left do
        not (first by name), for a reason; None when no node is short of anything but GPUs."""
        key = (gpus_per_worker, cpu, memory)
        hit = self._short.get(key)
        if hit is not None and hit[0] == self.version:
            return hit[1]
        found: Short | None = None
        cap = self.caps(cpu, memory)
        if cap is not None:
            lost = 0
            room = self.room or {}
            for free, nodes in self.buckets.items():
                per_node = free // gpus_per_worker if free > 0 else 0
                if per_node <= lost:
                    continue
                for node in nodes:
                    here = per_node - min(per_node, cap(node))
                    if here > lost or (here == lost and found is not None and node < found.node):
                        lost = here
                        left = room[node]
                        i = short_resource(left, cpu, memory)
                        found = Short(
                            node,
                            free,
                            RESOURCES[i],
                            max(left[i], 0),
                            self.allocatable[node][i],
                            (cpu, memory, 1)[i],
                        )
        self._short[key] = (self.version, found)
        return found

    def move(self, node: str, new: int) -> None:
        """Set a node's free GPUs, keeping buckets and totals in step (no undo record)."""
        old = self.free[node]
        if old == new:
            return
        self.version += 1
        bucket = self.buckets[old]
        del bucket[node]
        if not bucket:
            del self.buckets[old]
        self.buckets.setdefault(new, {})[node] = None
        self.free[node] = new
        self.total_free += max(new, 0) - max(old, 0)
        if self.changed is not None:
            self.changed.append(node)
        if self._capped:
            room = self.room.get(node) if self.room is not None else None
            self._recount(node, old, new, room, room)

    def room_changed(self, node: str, old: Room | None, new: Room | None) -> None:
        """A node's room besides GPUs went from `old` to `new` (None: not limited)."""
        self.version += 1
        if self.changed is not None:
            self.changed.append(node)
        if self._capped:
            free = self.free[node]
            self._recount(node, free, free, old, new)

    def _recount(
        self, node: str, old_free: int, new_free: int, old: Room | None, new: Room | None
    ) -> None:
        """Move the kept counts (`_capped`) by what one node's change made of its workers."""
        for key, total in self._capped.items():
            g, cpu, memory = key
            before = (old_free if old_free > 0 else 0) // g
            if before and old is not None:
                before = min(before, workers_in(old, cpu, memory))
            after = (new_free if new_free > 0 else 0) // g
            if after and new is not None:
                after = min(after, workers_in(new, cpu, memory))
            if after != before:
                self._capped[key] = total + after - before

    def take_all(self, taken: Mapping[str, int]) -> None:
        """`move` every node in `taken` down by its GPUs, in node order, at once.

        The buckets end as those moves would leave them (each node that did not move keeps its
        place in its bucket; moved nodes follow by name); rebuilding them once is cheaper than
        one move per node (setup of every plan: every node of a busy cluster moves). By name,
        not in the order of `taken`: placement takes nodes in bucket order, and the order in
        which a snapshot lists its running jobs must not decide where a gang goes.
        """
        free = self.free
        moved = {node: free[node] - taken[node] for node in sorted(taken) if taken[node]}
        if not moved:
            return
        self.version += 1
        self._capped.clear()
        if self.changed is not None:
            self.changed.extend(moved)
        self.buckets = buckets_after(self.buckets, moved)
        total = self.total_free
        for node, new in moved.items():
            old = free[node]
            free[node] = new
            total += (new if new > 0 else 0) - (old if old > 0 else 0)
        self.total_free = total

    def set_incoming(self, node: str, gpus: int) -> None:
        """GPUs of jobs being preempted on a node that nobody has claimed yet."""
        self.version += 1
        _set_count(self.incoming, node, gpus)

    def set_held(self, node: str, gpus: int) -> None:
        """GPUs of a node that a reservation keeps."""
        self.version += 1
        _set_count(self.held, node, gpus)

    def workers_fit(
        self,
        gpus_per_worker: int,
        extra: Mapping[str, int] | None = None,
        cpu: int = 0,
        memory: int = 0,
        incoming: bool = False,
    ) -> int:
        """How many workers of this size fit now on free GPUs (plus `extra` per node), and on
        limited nodes in the room left (plus what comes back if `incoming`)."""
        cap = self.caps(cpu, memory, incoming)
        if cap is not None:
            # Only nodes with room for a worker's GPUs: the buckets of that many free or more
            # (on a busy cluster a few), and the nodes `extra` adds to.
            total = 0
            plus: Mapping[str, int] = extra or {}
            for count, nodes in self.buckets.items():
                if count < gpus_per_worker:
                    continue
                per_node = count // gpus_per_worker
                for node in nodes:
                    if node not in plus:
                        room = cap(node)
                        total += per_node if per_node < room else room
            for node, more in plus.items():
                free = self.free.get(node, 0)
                per_node = ((free if free > 0 else 0) + more) // gpus_per_worker
                if per_node > 0:
                    room = cap(node)
                    total += per_node if per_node < room else room
            return total
        return self.workers_by_gpus(gpus_per_worker, extra)

    def workers_by_gpus(self, gpus_per_worker: int, extra: Mapping[str, int] | None = None) -> int:
        """`workers_fit` counting GPUs alone (on a limited flavor, an upper bound)."""
        fit = 0
        for count, nodes in self.buckets.items():
            if count >= gpus_per_worker:
                fit += (count // gpus_per_worker) * len(nodes)
        if extra:
            for node, more in extra.items():
                base = max(self.free.get(node, 0), 0)
                fit += (base + more) // gpus_per_worker - base // gpus_per_worker
        return fit

    def fits(self, gpus_per_worker: int, plus: str = "", cpu: int = 0, memory: int = 0) -> int:
        """`workers_fit` on the free GPUs, plus the `"held"` or `"incoming"` ones if named."""
        if self.room is None:
            cpu = memory = 0
        elif self.memo and not plus:
            kept = self._capped.get((gpus_per_worker, cpu, memory))
            if kept is None:
                kept = self.workers_fit(gpus_per_worker, None, cpu, memory)
                self._capped[(gpus_per_worker, cpu, memory)] = kept
            return kept
        key = (gpus_per_worker, plus, cpu, memory)
        if self.memo:
            hit = self._fits.get(key)
            if hit is not None and hit[0] == self.version:
                return hit[1]
        extra = self.held if plus == "held" else self.incoming if plus == "incoming" else None
        count = self.workers_fit(gpus_per_worker, extra, cpu, memory, plus == "incoming")
        if self.memo:
            self._fits[key] = (self.version, count)
        return count


class Short(NamedTuple):
    """A node short of something besides GPUs: its free GPUs, the resource (RESOURCES), what is
    left of it and allocatable, and what one worker asks of it."""

    node: str
    gpus_free: int
    resource: str
    left: int
    allocatable: int
    per_worker: int


def _put_gpu(fl: FlavorLedger, node: str, index: int, milli: int | None) -> None:
    """One GPU's thousandths used (None: nobody uses it), with no undo record."""
    assert fl.shared is not None
    gpus = fl.shared.setdefault(node, {})
    if milli is None:
        gpus.pop(index, None)
    else:
        gpus[index] = milli
    fl.version += 1


def _set_count(table: dict[str, int], node: str, gpus: int) -> None:
    if gpus:
        table[node] = gpus
    else:
        table.pop(node, None)


class Ledger:
    """All flavors, all groups, with an undo log for checkpoints."""

    def __init__(
        self, nodes: tuple[Node, ...], chains: Mapping[str, tuple[str, ...]], memo: bool = True
    ) -> None:
        """chains: team -> (team, its department) or (team,): usage is counted at every level.
        memo: whether the flavors keep their fit counts (`FlavorLedger.fits`)."""
        self.chains = chains
        self.flavors: dict[str, FlavorLedger] = {}
        self.used: dict[tuple[str, str], int] = {}
        self.leaving: dict[tuple[str, str], int] = {}
        self.nonpreemptible: dict[tuple[str, str], int] = {}
        self.user_used: dict[tuple[str, str, str], int] = {}
        self.used_milli: dict[tuple[str, str], int] = {}
        self.nonpreemptible_milli: dict[tuple[str, str], int] = {}
        self.victims: set[int] = set()
        # Who sits on the incoming GPUs of a node (job ids), to name them in reasons, and those
        # jobs by id: the snapshot's jobs being preempted, then this plan's victims.
        self.incoming_jobs: dict[tuple[str, str], list[int]] = {}
        self.leaving_jobs: dict[int, RunningJob] = {}
        self._undo: list[Undo] = []
        self._depth = 0
        # Moved by every change (and by every rollback that undoes one): an answer computed
        # at one stamp holds while the stamp stays.
        self.stamp = 0
        for node in sorted(nodes, key=_NAME):
            if not node.schedulable:
                continue
            capacity = node.capacity
            external = node.used_externally
            for flavor in sorted(capacity) if len(capacity) > 1 else capacity:
                fl = self.flavors.get(flavor)
                if fl is None:
                    fl = self.flavors[flavor] = FlavorLedger(flavor, memo)
                free = capacity[flavor] - (external.get(flavor, 0) if external else 0)
                for draining in node.draining:
                    if draining.flavor == flavor:
                        free -= draining.gpus  # incoming once the cycle says for whom
                fl.add_node(node.name, free, capacity[flavor])
        # Room besides GPUs, on the limited nodes only (module docstring).
        self.room: dict[str, Room] = {}
        self.room_incoming: dict[str, Room] = {}
        self.allocatable: dict[str, Room] = {}
        others_leave: dict[str, Room] = {}
        for node in nodes:
            if node.schedulable and node.limited:
                self.allocatable[node.name], self.room[node.name] = node_room(node)
                others_leave[node.name] = self.room[node.name]
        # A limited node's flavors: a change of its room moves their counts (`version`).
        self._sharing: dict[str, list[FlavorLedger]] = {}
        if self.room:
            for fl in self.flavors.values():
                here = [name for name in fl.free if name in self.room]
                if here:
                    fl.room, fl.room_incoming = self.room, self.room_incoming
                    fl.allocatable, fl.others_leave = self.allocatable, others_leave
                    for name in here:
                        self._sharing.setdefault(name, []).append(fl)

    # --- checkpoints -------------------------------------------------------------------------

    def checkpoint(self) -> int:
        self._depth += 1
        return len(self._undo)

    def rollback(self, mark: int) -> None:
        undo = self._undo
        if len(undo) > mark:
            self.stamp += 1
        while len(undo) > mark:
            undo.pop()()
        self._depth -= 1

    def commit(self, mark: int) -> None:
        del mark  # the changes stay; only the nesting ends
        self._depth -= 1
        if self._depth == 0:
            self._undo.clear()

    def _add(self, table: dict[tuple[str, str], int], key: tuple[str, str], delta: int) -> None:
        old = table.get(key, 0)
        table[key] = old + delta
        self.stamp += 1
        if self._depth:
            self._undo.append(lambda: table.__setitem__(key, old))

    def _set_free(self, fl: FlavorLedger, node: str, new: int) -> None:
        old = fl.free[node]
        fl.move(node, new)
        self.stamp += 1
        if self._depth:
            self._undo.append(lambda: fl.move(node, old))

    def _set_incoming(self, fl: FlavorLedger, node: str, new: int) -> None:
        old = fl.incoming.get(node, 0)
        fl.set_incoming(node, new)
        self.stamp += 1
        if self._depth:
            self._undo.append(lambda: fl.set_incoming(node, old))

    def _set_held(self, fl: FlavorLedger, node: str, new: int) -> None:
        old = fl.held.get(node, 0)
        fl.set_held(node, new)
        self.stamp += 1
        if self._depth:
            self._undo.append(lambda: fl.set_held(node, old))

    def _move_room(self, table: dict[str, Room], node: str, delta: Room, sign: int) -> None:
        """Add `delta` (sign 1) to, or take it (sign -1) from, a node's room in `table`."""
        old = table.get(node)
        base = old if old is not None else (0, 0, 0)
        self._put_room(
            table,
            node,
            (base[0] + sign * delta[0], base[1] + sign * delta[1], base[2] + sign * delta[2]),
        )
        self.stamp += 1
        if self._depth:
            self._undo.append(lambda: self._put_room(table, node, old))

    def _put_room(self, table: dict[str, Room], node: str, new: Room | None) -> None:
        """Set a node's room in `table` (None: drop it), and tell the node's flavors."""
        old = table.get(node)
        if new is None:
            table.pop(node, None)
        else:
            table[node] = new
        for fl in self._sharing.get(node, ()):
            if table is self.room:
                fl.room_changed(node, old, new)
            else:
                fl.version += 1

    # --- queries -----------------------------------------------------------------------------

    def in_use(self, group: str, flavor: str) -> int:
        """GPUs a group is entitled to count as its own: held or promised, minus those leaving;
        with its fractional jobs' thousandths rounded up, which compares exactly with any whole
        bound (shared_gpus.ceil_gpus)."""
        key = (group, flavor)
        whole = self.used.get(key, 0) - self.leaving.get(key, 0)
        if self.used_milli:
            milli = self.used_milli.get(key, 0)
            if milli:
                return whole + -(-milli // 1000)
        return whole

    def in_use_milli(self, group: str, flavor: str) -> int:
        """`in_use` exactly, in thousandths of a GPU."""
        key = (group, flavor)
        whole = self.used.get(key, 0) - self.leaving.get(key, 0)
        return whole * 1000 + self.used_milli.get(key, 0)

    def nonpreemptible_in_milli(self, group: str, flavor: str) -> int:
        key = (group, flavor)
        return self.nonpreemptible.get(key, 0) * 1000 + self.nonpreemptible_milli.get(key, 0)

    # --- changes -----------------------------------------------------------------------------

    def _count(self, team: str, user: str, flavor: str, gpus: int, preemptible: bool) -> None:
        for group in self.chains.get(team, (team,)):
            self._add(self.used, (group, flavor), gpus)
            if not preemptible:
                self._add(self.nonpreemptible, (group, flavor), gpus)
        key = (team, user, flavor)
        old = self.user_used.get(key, 0)
        self.user_used[key] = old + gpus
        self.stamp += 1
        if self._depth:
            self._undo.append(lambda: self.user_used.__setitem__(key, old))

    def hold_running(
        self, jobs: Iterable[RunningJob], promised: Container[int] = ()
    ) -> dict[tuple[str, str], int]:
        """Count the running jobs of the snapshot (setup only, never rolled back).

        Returns the GPUs each team's own running jobs hold, per flavor (the running part of
        its demand, see `fairshare.demand_by_team`). The GPUs of jobs being preempted become
        incoming, except those of the jobs in `promised`: they are kept for the job each was
        preempted for, and become incoming when that job is decided (`come_back`).

        Totals per team, per user and per node are summed first (hundreds of running jobs, a
        few teams), then counted at every level of the team's chain and each node moved between
        buckets once.
        """
        taken: dict[str, dict[str, int]] = {}  # flavor -> node -> GPUs held there
        by_user: dict[tuple[str, str, str], int] = {}
        nonpreemptible: dict[tuple[str, str], int] = {}
        leaving_by_team: dict[tuple[str, str], int] = {}
        flavors = self.flavors
        # The flavor of the last job, its ledger and its nodes' totals: most clusters have
        # one flavor, or a few, and this loop runs for every running job of every plan.
        last: str | None = None
        fl: FlavorLedger | None = None
        free: dict[str, int] = {}
        on_nodes: dict[str, int] = {}
        for job in jobs:
            gpus = job.gpus
            flavor = job.flavor
            user_key = (job.team, job.user, flavor)
            by_user[user_key] = by_user.get(user_key, 0) + gpus
            if not job.preemptible:
                key = (job.team, flavor)
                nonpreemptible[key] = nonpreemptible.get(key, 0) + gpus
            leaving = job.preempting_since is not None
            if leaving:
                key = (job.team, flavor)
                leaving_by_team[key] = leaving_by_team.get(key, 0) + gpus
                self.leaving_jobs[job.id] = job
            if flavor != last:
                last = flavor
                fl = flavors.get(flavor)
                if fl is not None:
                    free = fl.free
                    on_nodes = taken.setdefault(flavor, {})
            if fl is None:
                continue
            g = job.gpus_per_worker
            for node, workers in job.placement:
                if node not in free:
                    continue  # an unschedulable node: its GPUs never come back to the pool
                if fl.room is not None and node in fl.room:
                    self._hold_room(job, node, workers, leaving)
                node_gpus = workers * g
                on_nodes[node] = on_nodes.get(node, 0) + node_gpus  # held until really gone
                if leaving and job.id not in promised:
                    fl.set_incoming(node, fl.incoming.get(node, 0) + node_gpus)
                    self.incoming_jobs.setdefault((flavor, node), []).append(job.id)
        # Per user, then per team: a few users per team.
        used: dict[tuple[str, str], int] = {}
        user_used = self.user_used
        for user_key, gpus in by_user.items():
            user_used[user_key] = user_used.get(user_key, 0) + gpus
            key = (user_key[0], user_key[2])
            used[key] = used.get(key, 0) + gpus
        chains = self.chains
        for table, totals in (
            (self.used, used),
            (self.nonpreemptible, nonpreemptible),
            (self.leaving, leaving_by_team),
        ):
            for (team, flavor), gpus in totals.items():
                for group in chains.get(team, (team,)):
                    self._add(table, (group, flavor), gpus)
        for flavor, on_nodes in taken.items():
            flavors[flavor].take_all(on_nodes)
        return used

    def _hold_room(self, job: RunningJob, node: str, workers: int, leaving: bool) -> None:
        """A running job's workers on a limited node (setup): their room is taken, and comes
        back (incoming) when the job is being preempted."""
        ask = job.room_on(node, workers)
        self._move_room(self.room, node, ask, -1)
        if leaving:
            self._move_room(self.room_incoming, node, ask, 1)

    def admit(
        self,
        team: str,
        user: str,
        flavor: str,
        gpus_per_worker: int,
        preemptible: bool,
        placement: Placement,
        use_incoming: bool = False,
        use_held: Mapping[str, int] | None = None,
        cpu: int = 0,
        memory: int = 0,
    ) -> None:
        """Take GPUs for a gang: from incoming first (if allowed), then held (backfill), then free.
        On limited nodes take its workers' CPU, memory and pods too, in the same order.

        A job that takes incoming GPUs is promised them: it waits for the preemptions to finish.
        """
        self.admit_asks(
            team,
            user,
            flavor,
            preemptible,
            [
                (node, workers * gpus_per_worker, (workers * cpu, workers * memory, workers))
                for node, workers in placement
            ],
            use_incoming,
            use_held,
        )

    def admit_asks(
        self,
        team: str,
        user: str,
        flavor: str,
        preemptible: bool,
        asks: Iterable[NodeAsk],
        use_incoming: bool = False,
        use_held: Mapping[str, int] | None = None,
    ) -> None:
        """`admit` with what the gang takes given node by node (a gang of pods of different
        asks, model.node_asks)."""
        fl = self.flavors[flavor]
        total = 0
        room = fl.room
        for node, need, ask in asks:
            if room is not None and node in room:
                self._take_room(node, ask, use_incoming)
            total += need
            if use_incoming:
                take = min(need, fl.incoming.get(node, 0))
                if take:
                    self._set_incoming(fl, node, fl.incoming[node] - take)
                    need -= take
            if use_held and need:
                take = min(need, use_held.get(node, 0), fl.held.get(node, 0))
                if take:
                    self._set_held(fl, node, fl.held[node] - take)
                    need -= take
            if need:
                self._set_free(fl, node, fl.free[node] - need)
        self._count(team, user, flavor, total, preemptible)

    def share(self, flavors: Iterable[str]) -> None:
        """Let fractional work share the GPUs of `flavors` (setup)."""
        for flavor in flavors:
            fl = self.flavors.get(flavor)
            if fl is not None:
                fl.shared = {}

    def bind_teams(self, flavors: Iterable[str]) -> None:
        """Let each GPU of these shared flavors serve the team that opened it only (setup,
        after `share`)."""
        for flavor in flavors:
            fl = self.flavors.get(flavor)
            if fl is not None and fl.shared is not None:
                fl.gpu_team = {}

    def hold_shared(self, jobs: Iterable[RunningJob]) -> dict[tuple[str, str], int]:
        """Count the running fractional jobs of shared flavors (setup, after `hold_running`):
        their thousandths on each GPU of their `devices`, one whole GPU out of `free` for each
        GPU they open, their room and their teams' usage. Returns each team's, rounded up to
        whole GPUs per flavor (for its demand)."""
        opened: dict[str, dict[str, int]] = {}
        by_team: dict[tuple[str, str], int] = {}
        for job in jobs:
            fl = self.flavors[job.flavor]
            assert fl.shared is not None
            for node, index in job.devices:
                if node not in fl.free:
                    continue  # an unschedulable node: its GPUs never come back to the pool
                gpus = fl.shared.setdefault(node, {})
                if index not in gpus:
                    gpus[index] = 0
                    if fl.gpu_team is not None:
                        fl.gpu_team[(node, index)] = job.team
                    on_nodes = opened.setdefault(job.flavor, {})
                    on_nodes[node] = on_nodes.get(node, 0) + 1
                gpus[index] += job.gpu_milli
            if fl.room is not None:
                for node, workers in job.placement:
                    if node in fl.room:
                        self._hold_room(job, node, workers, False)
            milli = job.workers * job.gpu_milli
            key = (job.team, job.flavor)
            by_team[key] = by_team.get(key, 0) + milli
            for group in self.chains.get(job.team, (job.team,)):
                self._add(self.used_milli, (group, job.flavor), milli)
                if not job.preemptible:
                    self._add(self.nonpreemptible_milli, (group, job.flavor), milli)
        for flavor, on_nodes in opened.items():
            self.flavors[flavor].take_all(on_nodes)
        return {key: -(-milli // 1000) for key, milli in by_team.items()}

    def admit_shared(
        self,
        team: str,
        flavor: str,
        milli: int,
        preemptible: bool,
        placement: Placement,
        devices: Iterable[tuple[str, int]],
        cpu: int = 0,
        memory: int = 0,
    ) -> None:
        """Take `milli` thousandths on each GPU of `devices` (opening a fully free GPU takes it
        out of `free`), and on limited nodes the workers' CPU, memory and pods."""
        fl = self.flavors[flavor]
        assert fl.shared is not None
        room = fl.room
        for node, workers in placement:
            if room is not None and node in room:
                self._take_room(node, (workers * cpu, workers * memory, workers), False)
        workers = 0
        for node, index in devices:
            workers += 1
            gpus = fl.shared.get(node)
            on_gpu = None if gpus is None else gpus.get(index)
            if on_gpu is None:
                self._set_free(fl, node, fl.free[node] - 1)
                on_gpu = 0
                if fl.gpu_team is not None:
                    self._set_team(fl.gpu_team, (node, index), team)
            self._set_gpu(fl, node, index, on_gpu + milli)
        for group in self.chains.get(team, (team,)):
            self._add(self.used_milli, (group, flavor), workers * milli)
            if not preemptible:
                self._add(self.nonpreemptible_milli, (group, flavor), workers * milli)

    def claim_shared(
        self,
        team: str,
        flavor: str,
        milli: int,
        preemptible: bool,
        placement: Placement,
        taken: Mapping[str, int],
        cpu: int = 0,
        memory: int = 0,
    ) -> None:
        """A fractional gang claims GPUs coming back (`taken`, whole GPUs per node) and waits
        for them: they leave `incoming`, its workers' room is taken (what comes back first),
        and its team counts its thousandths from now, as `admit` counts a claimed gang."""
        fl = self.flavors[flavor]
        room = fl.room
        workers = 0
        for node, count in placement:
            workers += count
            if room is not None and node in room:
                self._take_room(node, (count * cpu, count * memory, count), True)
        for node, gpus in taken.items():
            self._set_incoming(fl, node, fl.incoming.get(node, 0) - gpus)
        for group in self.chains.get(team, (team,)):
            self._add(self.used_milli, (group, flavor), workers * milli)
            if not preemptible:
                self._add(self.nonpreemptible_milli, (group, flavor), workers * milli)

    def _set_team(self, teams: dict[tuple[str, int], str], gpu: tuple[str, int], team: str) -> None:
        old = teams.get(gpu)
        teams[gpu] = team
        if self._depth:

            def undo() -> None:
                if old is None:
                    teams.pop(gpu, None)
                else:
                    teams[gpu] = old

            self._undo.append(undo)

    def _set_gpu(self, fl: FlavorLedger, node: str, index: int, milli: int) -> None:
        """Set the thousandths used on one GPU of a shared flavor."""
        assert fl.shared is not None
        old = fl.shared.get(node, {}).get(index)
        _put_gpu(fl, node, index, milli)
        self.stamp += 1
        if self._depth:
            self._undo.append(lambda: _put_gpu(fl, node, index, old))

    def _take_room(self, node: str, ask: Room, use_incoming: bool) -> None:
        if use_incoming:
            back = self.room_incoming.get(node)
            if back is not None:
                take = (min(ask[0], back[0]), min(ask[1], back[1]), min(ask[2], back[2]))
                self._move_room(self.room_incoming, node, take, -1)
                ask = (ask[0] - take[0], ask[1] - take[1], ask[2] - take[2])
        if any(ask):
            self._move_room(self.room, node, ask, -1)

    def _room_back(self, job: RunningJob, sign: int) -> None:
        """A victim's room on limited nodes becomes incoming (sign 1), or stops being (-1)."""
        room = self.room
        for node, workers in job.placement:
            if node in room:
                self._move_room(self.room_incoming, node, job.room_on(node, workers), sign)

    def release(self, job: RunningJob) -> None:
        """Mark a running job as a victim: its GPUs become incoming, its team's share leaves."""
        self.victims.add(job.id)
        self.stamp += 1
        if self._depth:
            self._undo.append(lambda: self.victims.discard(job.id))
        for group in self.chains.get(job.team, (job.team,)):
            self._add(self.leaving, (group, job.flavor), job.gpus)
        if self.room:
            self._room_back(job, 1)
        fl = self.flavors.get(job.flavor)
        if fl is None:
            return
        for node, workers in job.placement:
            if node in fl.free:
                gpus = workers * job.gpus_per_worker
                self._set_incoming(fl, node, fl.incoming.get(node, 0) + gpus)

    def unrelease(self, job: RunningJob) -> None:
        """Undo `release` for one job in the middle of a what-if (used to drop needless victims)."""
        self.victims.discard(job.id)
        self.stamp += 1
        if self._depth:
            self._undo.append(lambda: self.victims.add(job.id))
        for group in self.chains.get(job.team, (job.team,)):
            self._add(self.leaving, (group, job.flavor), -job.gpus)
        if self.room:
            self._room_back(job, -1)
        fl = self.flavors.get(job.flavor)
        if fl is None:
            return
        for node, workers in job.placement:
            if node in fl.free:
                gpus = workers * job.gpus_per_worker
                self._set_incoming(fl, node, fl.incoming.get(node, 0) - gpus)

    def hold(self, flavor: str, node: str, gpus: int) -> None:
        """Keep free GPUs of a node for a reservation."""
        fl = self.flavors[flavor]
        gpus = min(gpus, max(fl.free[node], 0))
        if gpus:
            self._set_free(fl, node, fl.free[node] - gpus)
            self._set_held(fl, node, fl.held.get(node, 0) + gpus)

    def come_back(self, flavor: str, node: str, gpus: int, job_id: int) -> None:
        """GPUs of a node that job `job_id` holds while it is being preempted, or that its
        terminating pods hold (`Node.draining`), become incoming: a job may claim them and
        wait, as for a victim's (named after that job)."""
        fl = self.flavors.get(flavor)
        if fl is None or node not in fl.free or gpus <= 0:
            return
        self._set_incoming(fl, node, fl.incoming.get(node, 0) + gpus)
        self.incoming_jobs.setdefault((flavor, node), []).append(job_id)

    def name_incoming(self, job: RunningJob) -> None:
        """Name a victim of this cycle as a job its nodes' incoming GPUs wait on (reasons);
        once its preemption is committed: this is not undone."""
        self.stamp += 1
        self.leaving_jobs[job.id] = job
        for node, _ in job.placement:
            self.incoming_jobs.setdefault((job.flavor, node), []).append(job.id)
