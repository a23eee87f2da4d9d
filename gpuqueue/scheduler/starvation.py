"""The starvation guard: reservations for jobs that have waited too long, and backfill.

A starving job that does not fit gets the nodes where it will fit soonest, found by replaying the
expected ends of the running jobs of its flavor. The free GPUs of those nodes are held for it;
only backfill jobs, whose max runtime (or a margin on their predicted runtime, for a job that
declares none) ends before the reservation is expected to start, may use them. Reservations are
recomputed every cycle (starving jobs are considered first), so a node drains for the starving
job instead of being refilled by the stream of small jobs.
"""

from __future__ import annotations

import math

from gpuqueue.scheduler import reasons
from gpuqueue.scheduler.horizon import AT_ONCE, Horizon
from gpuqueue.scheduler.ledger import FlavorLedger, Ledger
from gpuqueue.scheduler.model import (
    Node,
    PendingJob,
    Placement,
    Policy,
    Reason,
    Reservation,
    RunningJob,
)
from gpuqueue.scheduler.placement import Cap, fit_on
from gpuqueue.scheduler.topology import Held, Topology

# (expected end, node, GPUs, job id): GPUs a running job should give back on a node.
ReleaseEvent = tuple[float, str, int, int]


def expected_end(job: RunningJob, policy: Policy) -> float:
    """When a running job should give its GPUs back; math.inf when nobody can tell."""
    runtime = job.expected_runtime if job.expected_runtime is not None else job.max_runtime
    end = job.started_at + runtime if runtime is not None else math.inf
    if job.preempting_since is not None:
        end = min(end, job.preempting_since + policy.preemption_grace_seconds)
    return end


def release_time(job: RunningJob) -> float | None:
    """`expected_end` of a job that is not being preempted; None when nobody can tell."""
    runtime = job.expected_runtime
    if runtime is None:
        runtime = job.max_runtime
        if runtime is None:
            return None
    end = job.started_at + runtime
    return None if end == math.inf else end


def backfill_runtime(job: PendingJob, policy: Policy) -> float | None:
    """How long a job may hold a reservation's GPUs for, as backfill counts it: its max
    runtime; else Policy.backfill_prediction_factor times its predicted runtime (a margin
    for a prediction that is a median: most jobs end well inside it); else None (it may not
    backfill). A job past its prediction only delays the reservation by what it overruns
    (its node's release is read again every cycle), where a reserved node that nothing may
    use idles until every job on it has ended. A declared expected runtime does not count:
    nothing enforces it, and a submitter who understated it would hold a starving gang's
    GPUs."""
    if job.max_runtime is not None:
        return job.max_runtime
    factor = policy.backfill_prediction_factor
    if factor <= 0 or job.expected_runtime is None or not job.runtime_predicted:
        return None
    return factor * job.expected_runtime


class Reserver:
    """Finds and holds reservations for one cycle."""

    def __init__(
        self,
        ledger: Ledger,
        nodes: tuple[Node, ...],
        running: tuple[RunningJob, ...],
        policy: Policy,
        horizon: Horizon,
        memo: bool = True,
        topology: Topology | None = None,
    ) -> None:
        """`memo`: whether the answers that jobs blocked by reservations ask for are kept
        (`backfill_room`, `behind`). `topology`: a job with a topology level reserves in one
        domain of it (topology.py)."""
        self.topology = topology
        self.ledger = ledger
        self.policy = policy
        self.horizon = horizon
        self._nodes = nodes
        self._running = running
        # flavor -> release events (`release_events`).
        self._events: dict[str, list[ReleaseEvent]] = {}
        self.reservations: list[Reservation] = []
        self.node_owner: dict[tuple[str, str], Reservation] = {}  # (flavor, node) -> reservation
        # Tens of thousands of jobs may wait behind the same reservations, and the answers
        # below depend only on the flavor's ledger and the reservations: each is kept with the
        # flavor's version and the count of reservations it was made at (`_current`).
        self.memo = memo
        self._rooms: dict[tuple[str, float], tuple[tuple[int, int], dict[str, int]]] = {}
        self._behind: dict[str, tuple[tuple[int, int], Reason]] = {}

    def release_events(self, fl: FlavorLedger) -> list[ReleaseEvent]:
        """(time, node, GPUs, job) at which running jobs of the flavor are expected to give
        GPUs back (not before now), sorted; without the jobs being preempted (they count
        through the incoming GPUs) and the victims of this cycle so far.

        Made once per flavor and cycle, when its first starving job tries to reserve (not a
        memo: `memo=False` keeps it too). A known approximation: a later reservation of the
        same cycle still counts a job preempted in between as releasing its GPUs at its
        expected end, though the job that preempted it has claimed them."""
        events = self._events.get(fl.name)
        if events is not None:
            return events
        name = fl.name
        victims = self.ledger.victims
        passed = self.horizon.passed
        events = []
        free = fl.free
        for job in self._running:
            if job.flavor != name or job.preempting_since is not None or job.id in victims:
                continue
            end = release_time(job)
            if end is None:
                continue
            # An overdue job is expected to end now, whenever that is (AT_ONCE): a reservation
            # that starts then varies with the clock (`reserve`). One still due moves with the
            # clock from its end on (a crossing).
            at = AT_ONCE if passed(end) else end
            g = job.gpus_per_worker
            for node, workers in job.placement:
                if node in free:
                    events.append((at, node, workers * g, job.id))
        events.sort()
        self._events[name] = events
        return events

    def reserve(
        self,
        job: PendingJob,
        strict: bool | None = None,
        known: bool = False,
        beyond: float | None = None,
    ) -> Reservation | None:
        """1. Start from the free GPUs of nodes no other reservation holds.
        2. Add GPUs coming back from preempted jobs after the grace, then the expected ends of
           running jobs in time order, until the whole gang fits (`strict`, for a gang that
           requires its topology level or holds out for it: in one domain of it): that time is
           the expected start.
        3. If it never fits on known ends, fall back to whole capacity with an unknown start
           (`known`: no reservation then; the caller has a better way to wait).
        4. `beyond` (seconds, with `strict`): no reservation either when the gang could start
           now on any nodes and one domain is expected to hold it only later than this (`_soon`).
        5. Place the gang there and hold the free GPUs of the chosen nodes.
        """
        if len(self.reservations) >= self.policy.max_reservations:
            return None
        ledger = self.ledger
        fl = ledger.flavors.get(job.flavor)
        if fl is None:
            return None
        if strict is None:
            strict = job.topology_required
        # Gpuqueue's jobs on the nodes end in time, others' pods may not: a node whose room
        # besides GPUs cannot hold the workers even then is not reserved.
        cap = fl.caps_without_ours(job.cpu_per_worker, job.memory_per_worker)
        start, avail, held = self._start(fl, job, cap, strict)
        if known and start == math.inf:
            return None  # step 3 would give an unknown start: nothing to place
        placement = self._fit(fl, job, avail, cap, strict, held)
        if placement is None:
            capacity = {
                n.name: n.capacity.get(job.flavor, 0) - n.used_externally.get(job.flavor, 0)
                for n in self._nodes
                if n.schedulable and n.name in avail
            }
            placement = self._fit(fl, job, capacity, cap, strict)
            start = math.inf
        if placement is None or (known and start == math.inf):
            return None
        if beyond is not None and strict and not self._soon(start, fl, job, cap, beyond):
            return None
        if start == AT_ONCE:
            start = self.horizon.read()  # it could start now, whenever now is
        g = job.gpus_per_worker
        for node, workers in placement:
            ledger.hold(job.flavor, node, workers * g)
        reservation = Reservation(job.id, placement, start)
        self.reservations.append(reservation)
        for node, _ in placement:
            self.node_owner[(job.flavor, node)] = reservation
        return reservation

    def _start(
        self, fl: FlavorLedger, job: PendingJob, cap: Cap | None, strict: bool
    ) -> tuple[float, dict[str, int], Held | None]:
        """Steps 1 and 2 of `reserve`: the expected start (AT_ONCE: now; math.inf: not on
        known ends), the GPUs available per node then and, in one domain (`strict`), what
        `Topology.start` found there for `_fit`."""
        g = job.gpus_per_worker
        owned = self.node_owner
        if owned:
            name = fl.name
            theirs = {n for f, n in owned if f == name}  # (a few: the reservations' nodes)
            avail = {n: f if f > 0 else 0 for n, f in fl.free.items() if n not in theirs}
        else:
            avail = {n: f if f > 0 else 0 for n, f in fl.free.items()}
        events = self.release_events(fl)
        if fl.incoming:
            grace = self.policy.preemption_grace_seconds
            back = self.horizon.read() + grace if grace > 0 else AT_ONCE  # a grace from now
            coming = [(back, n, gpus, -1) for n, gpus in fl.incoming.items() if n in avail]
            events = sorted(events + coming)
        # One domain: its GPUs and workers counted per domain, moved with each event.
        topology = self.topology
        if strict and topology is not None and topology.level_of(job) >= 0:
            start, held = topology.start(fl, job, avail, events, cap)
            return start, avail, held
        fit = 0
        for v in avail.values():
            fit += v // g
        if fit >= job.workers:
            return AT_ONCE, avail, None
        for time, node, gpus, _ in events:
            old = avail.get(node)
            if old is None:
                continue
            avail[node] = old + gpus
            fit += (old + gpus) // g - old // g
            if fit >= job.workers:
                return time, avail, None
        return math.inf, avail, None

    def _soon(
        self, start: float, fl: FlavorLedger, job: PendingJob, cap: Cap | None, beyond: float
    ) -> bool:
        """Whether a gang expected to hold one domain at `start` is worth reserving it for:
        when it could start on any nodes now (step 2 without the domain), only if the domain
        is expected within `beyond` seconds (compared through the clock); when it could not,
        always: it waits either way, and the choice comes again once it could (a later plan).
        """
        if start == AT_ONCE:
            return True
        anywhere, _, _ = self._start(fl, job, cap, False)
        if anywhere != AT_ONCE:
            return True
        return self.horizon.passed(start - beyond)

    def ends_before(self, job_id: int, runtime: float | None) -> bool:
        """Whether a job of this max runtime, started now, ends before the reservation of
        `job_id` is expected to start (False when it has none)."""
        if runtime is None:
            return False
        for reservation in self.reservations:  # a few (Policy.max_reservations)
            if reservation.job_id == job_id:
                return self.horizon.within(runtime, reservation.expected_start)
        return False

    def _fit(
        self,
        fl: FlavorLedger,
        job: PendingJob,
        avail: dict[str, int],
        cap: Cap | None,
        strict: bool,
        held: Held | None = None,
    ) -> Placement | None:
        """The nodes to reserve: in one domain of the job's topology level when one holds it
        (`strict`: only so), else as any job's. `held`: what `Topology.start` found of
        `avail` (strict)."""
        strategy = self.policy.placement
        topology = self.topology
        if topology is not None and job.topology_level and topology.level_of(job) >= 0:
            if held is not None:
                found = topology.place_held(fl, job, avail, held, strategy, cap)
            else:
                found = topology.place_on(fl, job, avail, strategy, cap, strict=strict)
            if found is not None:
                return found.placement
            if strict:
                return None
        return fit_on(avail, job.workers, job.gpus_per_worker, strategy, cap)

    def _current(self, flavor: str) -> tuple[int, int]:
        return (self.ledger.flavors[flavor].version, len(self.reservations))

    def behind(self, job: PendingJob) -> Reason:
        """Why `job` waits when GPUs held for reservations are all it lacks: the reservations
        that hold GPUs of its flavor, and the earliest of their expected starts."""
        flavor = job.flavor
        current = self._current(flavor)
        if self.memo:
            hit = self._behind.get(flavor)
            if hit is not None and hit[0] == current:
                return hit[1]
        owners = {
            self.node_owner[(flavor, node)].job_id for node in self.ledger.flavors[flavor].held
        }
        holders = [r for r in self.reservations if r.job_id in owners]
        start = min(r.expected_start for r in holders) if holders else self.horizon.read()
        why = reasons.behind_reservation(job, start, tuple(r.job_id for r in holders))
        if self.memo:
            self._behind[flavor] = (current, why)
        return why

    def backfill_room(self, job: PendingJob) -> dict[str, int]:
        """Held GPUs `job` may borrow: only where its max runtime (or its margin on its
        predicted runtime, `backfill_runtime`) ends before the reservation."""
        if not self.reservations:
            return {}
        runtime = backfill_runtime(job, self.policy)
        if runtime is None:
            return {}
        flavor = job.flavor
        current = self._current(flavor)
        if self.memo:
            hit = self._rooms.get((flavor, runtime))
            if hit is not None and hit[0] == current:
                return hit[1]
        room: dict[str, int] = {}
        for node, gpus in self.ledger.flavors[flavor].held.items():
            owner = self.node_owner.get((flavor, node))
            if owner is None:
                continue
            # (A kept answer above was reached with the same comparisons: same runtime, same
            # holders.)
            if self.horizon.within(runtime, owner.expected_start):
                room[node] = gpus
        if self.memo:
            self._rooms[(flavor, runtime)] = (current, room)
        return room
